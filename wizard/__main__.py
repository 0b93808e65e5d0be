"""``python -m wizard`` is ``dswiz``."""

from wizard.cli import main

if __name__ == "__main__":
    main()
