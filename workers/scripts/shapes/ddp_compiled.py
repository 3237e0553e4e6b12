"""Loop shape 'ddp_compiled' (issue 43): loop.py with compile="inner"; prints its own samples/s."""

from loop import main

if __name__ == "__main__":
    main(compile="inner")
