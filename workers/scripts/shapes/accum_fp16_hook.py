"""Loop shape 'accum_fp16_hook' (issue 43): loop.py with accum=4, comm_hook="fp16"; prints its own samples/s."""

from loop import main

if __name__ == "__main__":
    main(accum=4, comm_hook="fp16")
