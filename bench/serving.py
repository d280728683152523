"""A server's KV-cache page traffic, for bench.py's decode tables.

Which page slots a sequence's block-table row names depends on the allocator that gave
them out and on everything else the server did meanwhile. serve() plays that out for the
benchmark's batch, in rounds of 16 decode steps (each running sequence takes one page of
16 tokens a round), and returns the batch's rows:

- Warm-up: for `pages_per_seq` rounds, only other ("background") sequences run, so that the
  free slots are in whatever order that leaves them.
- The batch's sequences then arrive at random rounds within the next `pages_per_seq`, each
  with a prompt of 1 .. pages_per_seq pages (taken at once, as a prefill does), grow by a
  page a round up to pages_per_seq, and keep their pages.
- Background sequences arrive with prompts of 1 .. pages_per_seq pages while the cache has
  room beyond what the batch will still need, grow by a page a round, each ends with
  probability 1/40 a round, and the youngest is preempted (its pages taken back) when the
  cache runs short.

The cache holds 1.25 times the batch's pages (rounded up to whole windows of 64), so at
the end it is nearly full. Two allocators take the same traffic: attnc.PageAllocator, and
FreeList, the plain first-in first-out list a server without one keeps.

    python3 bench/serving.py     # pages per 2 MiB window of the five decode rows' tables

needs libattnc.so (no GPU, no torch); it exits non-zero when a table gives a slot twice or
PageAllocator keeps a row in fewer than 32 pages per window on average.
"""

import collections
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "runtime", "python"))
import attnc  # noqa: E402

# The benchmark's decode rows: (batch, pages of 16 per sequence).
ROWS = ((64, 64), (64, 256), (16, 1024), (128, 256), (8, 2048))
WINDOW = 64  # pages of 16 tokens at 8 KV heads, head_dim 128, bf16: 2 MiB of K (of V)
WINDOW_BYTES = 2 << 20  # the GPU's large page
END_CHANCE = 1 / 40


class FreeList:
    """Pages from the front of a list, returned to its end (slots 0 .. n - 1 in order
    at first): the allocator of a server that keeps no locality."""

    def __init__(self, num_pages):
        self.free = collections.deque(range(num_pages))
        self.held = {}

    def allocate(self, sequence, count=1):
        if count > len(self.free):
            raise attnc.AttncError(f"sequence {sequence} asks for {count} pages, but only "
                                   f"{len(self.free)} are free")
        pages = [self.free.popleft() for _ in range(count)]
        self.held.setdefault(sequence, []).extend(pages)
        return pages

    def release(self, sequence):
        self.free.extend(self.held.pop(sequence))

    @property
    def free_pages(self):
        return len(self.free)


def pool_pages(batch, pages_per_seq, spare=1.25):
    """The cache's slots for a row: `spare` times the batch's pages, in whole windows."""
    return -(-int(batch * pages_per_seq * spare) // WINDOW) * WINDOW


def serve(allocator, batch, pages_per_seq, seed=1):
    """The block-table rows (lists of slots) of `batch` sequences of `pages_per_seq` pages
    each, as `allocator` gave them out under the traffic the module docstring describes.
    Sequence ids 0 .. batch - 1 are the batch's, later ones the background's."""
    rng = random.Random(seed)
    arrivals = sorted(pages_per_seq + rng.randrange(pages_per_seq) for _ in range(batch))
    rows = {}
    background = []
    next_id = batch
    rnd = 0
    while len(rows) < batch or any(len(r) < pages_per_seq for r in rows.values()):
        for s in [s for s in background if rng.random() < END_CHANCE]:
            allocator.release(s)
            background.remove(s)
        while len(rows) < batch and arrivals[len(rows)] <= rnd:
            prompt = rng.randint(1, pages_per_seq)
            while allocator.free_pages < prompt:
                allocator.release(background.pop())
            rows[len(rows)] = allocator.allocate(len(rows), prompt)
        # What the batch will still take: its growth, and the prompts still to come.
        need = (sum(pages_per_seq - len(r) for r in rows.values()) +
                (batch - len(rows)) * pages_per_seq)
        while True:
            prompt = rng.randint(1, pages_per_seq)
            if allocator.free_pages < need + prompt + len(background) + 16:
                break
            allocator.allocate(next_id, prompt)
            background.append(next_id)
            next_id += 1
        for s, r in rows.items():
            if len(r) < pages_per_seq:
                while allocator.free_pages < 1:
                    allocator.release(background.pop())
                r += allocator.allocate(s)
        for s in list(background):
            if allocator.free_pages < need + 1:
                allocator.release(s)
                background.remove(s)
            else:
                allocator.allocate(s)
        rnd += 1
    return [rows[s] for s in range(batch)]


def tables(batch, pages_per_seq, seed=1, spare=1.25):
    """(cache slots, PageAllocator's rows, FreeList's rows) under the same traffic, in a
    cache of `spare` times the batch's pages."""
    slots = pool_pages(batch, pages_per_seq, spare)
    return (slots, serve(attnc.PageAllocator(slots, WINDOW), batch, pages_per_seq, seed),
            serve(FreeList(slots), batch, pages_per_seq, seed))


def pages_per_window(rows):
    """The mean over rows of a row's pages over the windows they lie in (at most 64)."""
    return sum(len(r) / len({p // WINDOW for p in r}) for r in rows) / len(rows)


def main():
    bad = 0
    print("pages per 2 MiB window of the rows (at most 64)")
    print("B x pages of 16 (cache slots)   PageAllocator   FreeList")
    for batch, pps in ROWS:
        slots, ours, theirs = tables(batch, pps)
        for name, rows in (("PageAllocator", ours), ("FreeList", theirs)):
            flat = [p for r in rows for p in r]
            if len(set(flat)) != len(flat) or not all(0 <= p < slots for p in flat):
                print(f"B {batch} x {pps}: {name} gave a slot twice or out of range")
                bad += 1
        a, b = pages_per_window(ours), pages_per_window(theirs)
        print(f"B {batch:3d} x {pps:4d} ({slots:5d} slots)   {a:13.1f}   {b:8.1f}")
        if a < 32:
            print(f"B {batch} x {pps}: PageAllocator's rows hold {a:.1f} pages per window, "
                  "expected 32 or more")
            bad += 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        # Run alone it checks the allocators' tables of the benchmark's rows; it takes no options.
        if sys.argv[1] in ("-h", "--help"):
            print(__doc__.strip())
            sys.exit(0)
        sys.exit(f"serving.py takes no arguments (got {' '.join(sys.argv[1:])})")
    try:
        main()
    except attnc.AttncError as e:  # e.g. no libattnc.so: one line, not a traceback
        sys.exit(f"serving.py: {e}")
