"""`python -m pte._cli`: the same as the `pte` command."""

from pte._cli._main import main

if __name__ == "__main__":
    raise SystemExit(main())
