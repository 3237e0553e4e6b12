"""Loop shape 'compiled_ddp' (issue 43): loop.py with compile="outer"; prints its own samples/s."""

from loop import main

if __name__ == "__main__":
    main(compile="outer")
