"""Loop shape 'accum' (issue 43): loop.py with accum=4; prints its own samples/s."""

from loop import main

if __name__ == "__main__":
    main(accum=4)
