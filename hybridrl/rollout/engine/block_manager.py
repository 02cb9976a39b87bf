"""Ref-counted fixed-size KV blocks with prefix caching by chained hashes of full blocks (no torch).

How the `n` samples of one prompt share the prompt's KV: by prefix-cache hits, not fork/copy-on-write.
The first sample's `allocate` registers the hash of every FULL prompt block; the other samples hit
those hashes and take a reference on the same physical blocks. The partial last block (< block_size
tokens) is recomputed by each sample into a block of its own. This keeps one mechanism for both
in-call sharing and cross-call reuse (a repeated prompt hits blocks that are freed but not yet
reused), needs no copy kernel, and costs at most block_size - 1 recomputed tokens per sample, which
is where the samples diverge anyway.
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections import OrderedDict

from hybridrl.rollout.engine.sequence import Sequence


def hash_block(token_ids: array, prefix: bytes) -> bytes:
    """Chained hash: a block's identity includes every token before it (`Sequence.block_tokens`'s int64 array)."""
    return _digest(prefix, token_ids.tobytes())


def _digest(prefix: bytes, block: bytes) -> bytes:
    return hashlib.blake2b(prefix + block, digest_size=16).digest()


def prompt_hash_chain(token_ids: array, block_size: int, known: list[bytes] | None = None) -> list[bytes]:
    """The chained hashes of every full block of `token_ids` (an int64 array: what `Sequence.prompt_block_hashes`
    caches), computed ahead of scheduling: the request front end does it while a step runs. `known`: the chain of
    its leading blocks, hashed before (a resumed request's, by the sequence it resumes), extended here."""
    data, width = token_ids.tobytes(), 8 * block_size
    chain = list(known or [])
    prefix = chain[-1] if chain else b""
    for start in range(len(chain) * width, len(data) - width + 1, width):
        prefix = _digest(prefix, data[start:start + width])
        chain.append(prefix)
    return chain


class ResumedChains:
    """The hash chains of aborted requests' written blocks, by their tokens, for the requests that resume them.

    A resumed request's prompt is the aborted one's tokens (`rollout.base.resume_request`), so its chain is the
    aborted one's plus at most one block: asynchronous training resumes thousands of requests after every weight
    update, and hashing each one's whole context again, block by block, took a tenth of a second a step on the host.
    A chain is taken once; past `capacity` the oldest go (requests never resumed). Thread-safe: the asyncio front
    end builds requests on its caller's thread."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._chains: dict[bytes, list[bytes]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._chains)

    def remember(self, seq: Sequence) -> None:
        if seq.written_block_hashes:
            with self._lock:
                self._chains[_digest(b"", seq.token_ids.tobytes())] = seq.written_block_hashes
                while len(self._chains) > self.capacity:
                    del self._chains[next(iter(self._chains))]

    def take(self, token_ids: array) -> list[bytes]:
        """The chain remembered for exactly these tokens (an int64 array; the chain is forgotten), or []."""
        key = _digest(b"", token_ids.tobytes())
        with self._lock:
            return self._chains.pop(key, [])


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "token_ids")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.hash: bytes | None = None
        self.token_ids = array("q")  # compared with `Sequence.block_tokens`


class BlockManager:
    """Owns `num_blocks` KV blocks of `block_size` tokens; free blocks keep their hash until reused.

    Blocks are created on first use: an H200 KV cache holds ~10^5-10^6 blocks, and a new manager is
    built at every engine wake-up and weight update (the prefix cache is invalid then), so building
    them all up front cost most of a second per RL step.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.num_blocks = num_blocks
        self.blocks: dict[int, Block] = {}  # every block id handed out so far
        self._next_fresh = 0  # ids >= this were never used
        # Freed blocks, insertion-ordered: the longest-free is reused first (after never-used ones),
        # so recently freed prefixes survive longest.
        self.free_block_ids: OrderedDict[int, None] = OrderedDict()
        self.hash_to_block_id: dict[bytes, int] = {}

    @property
    def num_free_blocks(self) -> int:
        return self.num_blocks - self._next_fresh + len(self.free_block_ids)

    @property
    def num_used_blocks(self) -> int:
        """Blocks some sequence holds now (freed blocks that only keep a cached prefix are free)."""
        return self.num_blocks - self.num_free_blocks

    def _take_free_block(self) -> Block:
        if self._next_fresh < self.num_blocks:
            block = self.blocks[self._next_fresh] = Block(self._next_fresh)
            self._next_fresh += 1
            block.ref_count = 1
            return block
        block = self.blocks[self.free_block_ids.popitem(last=False)[0]]
        if block.hash is not None and self.hash_to_block_id.get(block.hash) == block.block_id:
            del self.hash_to_block_id[block.hash]  # its old contents are about to be overwritten
        block.hash, block.token_ids, block.ref_count = None, array("q"), 1
        return block

    def _register(self, block: Block, token_ids: array, h: bytes) -> bytes:
        """`token_ids`: `Sequence.block_tokens`'s copy of the block's tokens (kept, not copied again)."""
        block.hash = h
        block.token_ids = token_ids
        self.hash_to_block_id[h] = block.block_id
        return h

    def _block_hash(self, seq: Sequence, i: int, prefix: bytes) -> bytes:
        """Hash of `seq`'s full block i; prompt blocks are hashed once per prompt (the n samples of a
        prompt share `seq.prompt_block_hashes`), generated blocks every time (they differ per sample)."""
        cache = seq.prompt_block_hashes
        if i < len(cache):
            return cache[i]
        h = hash_block(seq.block_tokens(i, self.block_size), prefix)
        if i == len(cache) and (i + 1) * self.block_size <= seq.num_prompt_tokens:
            cache.append(h)
        return h

    def _cached_block(self, seq: Sequence, i: int, prefix: bytes) -> tuple[Block | None, bytes]:
        token_ids = seq.block_tokens(i, self.block_size)
        if not self.enable_prefix_caching or len(token_ids) < self.block_size:
            return None, b""
        h = self._block_hash(seq, i, prefix)
        block_id = self.hash_to_block_id.get(h)
        if block_id is None or self.blocks[block_id].token_ids != token_ids:
            return None, h
        return self.blocks[block_id], h

    def num_cached_tokens(self, seq: Sequence) -> int:
        """How many leading tokens of `seq` `allocate` would find in the prefix cache (a dry run)."""
        return len(self.prefix_hits(seq)) * self.block_size

    def prefix_hits(self, seq: Sequence) -> list[tuple[Block, bytes]]:
        """The cached blocks (and their hashes) that `seq`'s leading full blocks match; `allocate` takes them
        when nothing changed the cache in between (the scheduler's dry run, then its admission)."""
        hits, prefix = [], b""
        for i in range(seq.num_tokens // self.block_size):
            block, prefix = self._cached_block(seq, i, prefix)
            if block is None:
                break
            hits.append((block, prefix))
        return hits

    def can_allocate(self, seq: Sequence) -> bool:
        # Conservative: prefix hits may need fewer free blocks, never more.
        return self.num_free_blocks >= seq.num_blocks(self.block_size)

    def allocate(self, seq: Sequence, hits: list[tuple[Block, bytes]] | None = None) -> None:
        """Give `seq` a block table for all its tokens, reusing cached full blocks of its prefix (`hits`: from
        `prefix_hits` with the cache unchanged since; found here when not given)."""
        assert not seq.block_table
        hits = self.prefix_hits(seq) if hits is None else hits
        prefix = b""
        for block, prefix in hits:
            if block.ref_count == 0:
                del self.free_block_ids[block.block_id]
            block.ref_count += 1
            seq.block_table.append(block.block_id)
        seq.num_cached_tokens = len(hits) * self.block_size
        for i in range(len(hits), seq.num_blocks(self.block_size)):
            block = self._take_free_block()
            tokens = seq.block_tokens(i, self.block_size)
            if len(tokens) == self.block_size and self.enable_prefix_caching:
                prefix = self._register(block, tokens, self._block_hash(seq, i, prefix))
            seq.block_table.append(block.block_id)

    def cache_written_blocks(self, seq: Sequence) -> None:
        """Register `seq`'s full blocks whose KV is written in the prefix cache, so a later request whose
        prompt extends its tokens (a follow-up turn, a resumed request) reuses them until they are evicted.

        Written: positions 0 .. len - 2 (a sequence's last token is the next decode input; its KV does not
        exist yet). Blocks filled inside a decode burst carry no hash until now; a block past the written
        part may still receive a queued burst's junk, so it is left out."""
        if not self.enable_prefix_caching:
            return
        chain, prefix = [], b""
        for i in range((len(seq) - 1) // self.block_size):
            block = self.blocks[seq.block_table[i]]
            if block.hash is None:
                tokens = seq.block_tokens(i, self.block_size)
                prefix = self._register(block, tokens, hash_block(tokens, prefix))
            else:
                prefix = block.hash
            chain.append(prefix)
        seq.written_block_hashes = chain

    def deallocate(self, seq: Sequence) -> None:
        for block_id in reversed(seq.block_table):  # tail first: prefix blocks stay cached longest
            block = self.blocks[block_id]
            block.ref_count -= 1
            assert block.ref_count >= 0
            if block.ref_count == 0:
                self.free_block_ids[block_id] = None
        seq.block_table = []
        seq.num_cached_tokens = 0

    def can_append(self, seq: Sequence) -> bool:
        """Whether `seq`'s newest token (the next decode input) has a KV slot or a free block to get one."""
        needs_block = len(seq) > len(seq.block_table) * self.block_size
        return self.num_free_blocks >= int(needs_block)

    def blocks_to_reserve(self, seq: Sequence, num_steps: int) -> int:
        """Free blocks `reserve(seq, num_steps)` would take."""
        capacity_needed = len(seq) - 1 + num_steps  # decode step i writes the KV of position len - 1 + i
        return max(0, -(-capacity_needed // self.block_size) - len(seq.block_table))

    def reserve(self, seq: Sequence, num_steps: int) -> None:
        """Before a burst of `num_steps` decode steps: blocks for every KV slot the burst writes.

        Blocks filled during a burst are not hashed into the prefix cache (their tokens are only known
        after it); generated tokens are what samples differ in, so they were not worth sharing anyway.
        """
        for _ in range(self.blocks_to_reserve(seq, num_steps)):
            seq.block_table.append(self._take_free_block().block_id)

    def may_append(self, seq: Sequence) -> None:
        """Before decoding `seq`'s newest token: add a block if it starts one, hash the block it fills."""
        n = len(seq)
        if n > len(seq.block_table) * self.block_size:
            seq.block_table.append(self._take_free_block().block_id)
        if n % self.block_size == 0 and self.enable_prefix_caching:
            i = n // self.block_size - 1
            prev = self.blocks[seq.block_table[i - 1]].hash if i > 0 else b""
            block = self.blocks[seq.block_table[i]]
            if prev is not None and block.hash is None:
                tokens = seq.block_tokens(i, self.block_size)
                self._register(block, tokens, hash_block(tokens, prev))
