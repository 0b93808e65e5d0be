"""The Textual dashboard shared by `dswiz launch` and `dswiz monitor`: it renders Snapshots, nothing else."""
