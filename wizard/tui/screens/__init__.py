"""One module per wizard step, plus the modal dialogs (help, confirm)."""
