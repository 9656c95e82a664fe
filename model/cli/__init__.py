"""The command lines: one thin `main(argv)` per command, run by the entry modules model/train.py, release.py, ..."""
