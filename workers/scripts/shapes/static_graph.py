"""Loop shape 'static_graph' (issue 43): loop.py with static_graph=True; prints its own samples/s."""

from loop import main

if __name__ == "__main__":
    main(static_graph=True)
