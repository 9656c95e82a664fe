"""Command lines: one thin `main(argv)` per `python -m model.<command>`."""
