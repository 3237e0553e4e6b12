"""Loop shape 'find_unused' (issue 43): loop.py with find_unused=True; prints its own samples/s."""

from loop import main

if __name__ == "__main__":
    main(find_unused=True)
