"""BlockManager: ref counts, prefix sharing across samples and calls, freeing."""

from array import array

from hybridrl.rollout.engine.block_manager import BlockManager, ResumedChains, prompt_hash_chain
from hybridrl.rollout.engine.sequence import Sequence


def make_seq(prompt, row=0):
    return Sequence(row, prompt, max_new_tokens=8, seed=0)


def test_samples_share_full_prompt_blocks_and_release_them():
    bm = BlockManager(num_blocks=16, block_size=4)
    prompt = list(range(10))  # 2 full blocks + a partial one
    seqs = [make_seq(prompt, row) for row in range(3)]
    for seq in seqs:
        bm.allocate(seq)
    shared = seqs[0].block_table[:2]
    assert all(s.block_table[:2] == shared for s in seqs)
    assert len({s.block_table[2] for s in seqs}) == 3  # each sample owns its partial last block
    assert [bm.blocks[b].ref_count for b in shared] == [3, 3]
    assert [s.num_cached_tokens for s in seqs] == [0, 8, 8]
    assert bm.num_free_blocks == 16 - 2 - 3
    for seq in seqs:
        bm.deallocate(seq)
    assert bm.num_free_blocks == 16
    assert all(b.ref_count == 0 for b in bm.blocks.values())


def test_repeated_prompt_hits_freed_blocks_until_reused():
    bm = BlockManager(num_blocks=4, block_size=4)
    first = make_seq(list(range(8)))
    bm.allocate(first)
    bm.deallocate(first)
    again = make_seq(list(range(8)))
    bm.allocate(again)
    assert again.num_cached_tokens == 8 and again.block_table == [0, 1]
    bm.deallocate(again)
    # Different prompts of 4 blocks evict everything; the old prefix no longer hits.
    other = make_seq(list(range(100, 116)))
    bm.allocate(other)
    bm.deallocate(other)
    third = make_seq(list(range(8)))
    bm.allocate(third)
    assert third.num_cached_tokens == 0


def test_prefix_hash_is_chained():
    bm = BlockManager(num_blocks=8, block_size=4)
    a = make_seq([1, 2, 3, 4, 5, 6, 7, 8])
    b = make_seq([9, 9, 9, 9, 5, 6, 7, 8])  # same second block, different prefix
    bm.allocate(a)
    bm.allocate(b)
    assert b.num_cached_tokens == 0 and set(a.block_table).isdisjoint(b.block_table)


def test_append_allocates_at_block_boundary_and_registers_full_blocks():
    bm = BlockManager(num_blocks=3, block_size=4)
    seq = make_seq([1, 2, 3])
    bm.allocate(seq)
    seq.token_ids.append(4)  # fills block 0
    assert bm.can_append(seq)
    bm.may_append(seq)
    assert len(seq.block_table) == 1 and bm.blocks[seq.block_table[0]].hash is not None
    seq.token_ids.append(5)  # starts block 1
    bm.may_append(seq)
    assert len(seq.block_table) == 2 and bm.num_free_blocks == 1
    twin = make_seq([1, 2, 3, 4, 9])
    bm.allocate(twin)  # hits the block completed during decode
    assert twin.num_cached_tokens == 4 and twin.block_table[0] == seq.block_table[0]
    seq.token_ids.extend([6, 7, 8, 9])
    assert not bm.can_append(seq)  # needs a 3rd block, none left


def test_prefix_caching_off_shares_nothing():
    bm = BlockManager(num_blocks=8, block_size=4, enable_prefix_caching=False)
    a, b = make_seq(list(range(8))), make_seq(list(range(8)))
    bm.allocate(a)
    bm.allocate(b)
    assert b.num_cached_tokens == 0 and set(a.block_table).isdisjoint(b.block_table)


def test_blocks_are_created_on_first_use_and_fresh_ones_go_first():
    """A new manager (built at every wake-up and weight update) creates no per-block objects up front;
    never-used blocks are handed out before freed ones, which keep their prefix hashes longer."""
    from hybridrl.rollout.engine.sequence import Sequence

    bm = BlockManager(1_000_000, 4)
    assert bm.blocks == {} and bm.num_free_blocks == 1_000_000
    first = Sequence(0, list(range(8)), 4, seed=0)
    bm.allocate(first)
    bm.deallocate(first)
    second = Sequence(1, list(range(100, 108)), 4, seed=0)
    bm.allocate(second)
    assert set(second.block_table).isdisjoint(first.block_table)  # fresh ids first
    assert bm.num_cached_tokens(Sequence(2, list(range(8)), 4, seed=0)) == 8  # first's prefix still cached
    assert len(bm.blocks) == 4 and bm.num_free_blocks == 1_000_000 - 2


def test_a_finished_sequences_written_blocks_serve_its_extension():
    """Blocks filled by a decode burst carry no hash until the sequence leaves; then every full block whose KV
    is written (all positions but the last token's) is cached, and a prompt extending the sequence hits them."""
    bm = BlockManager(num_blocks=16, block_size=4)
    seq = make_seq(list(range(6)))
    bm.allocate(seq)
    bm.reserve(seq, 10)  # one burst of 10 decode steps
    seq.token_ids.extend(range(50, 60))  # 16 tokens: position 15 (the last) has no KV yet
    extension = make_seq([*seq.token_ids, 99], row=1)
    assert bm.num_cached_tokens(extension) == 4  # only the prompt's full block was hashed
    bm.cache_written_blocks(seq)
    bm.deallocate(seq)
    assert bm.num_cached_tokens(extension) == 12  # blocks 0-2; block 3 holds the unwritten position 15
    bm.allocate(extension)
    assert extension.num_cached_tokens == 12 and bm.num_free_blocks == 16 - 5


def test_a_precomputed_hash_chain_is_the_one_allocate_registers():
    bm = BlockManager(num_blocks=16, block_size=4)
    seq = make_seq(list(range(11)))  # 2 full blocks + 3 tokens
    bm.allocate(seq)
    chain = prompt_hash_chain(array("q", range(11)), 4)
    assert chain == [bm.blocks[b].hash for b in seq.block_table[:2]] and len(chain) == 2
    seeded = Sequence(1, list(range(11)), 8, seed=0, prompt_block_hashes=list(chain))
    assert bm.num_cached_tokens(seeded) == 8


def test_a_known_chain_is_extended_to_the_chain_of_the_whole_prompt():
    tokens = array("q", range(100, 139))  # 9 full blocks of 4, 3 tokens over
    whole = prompt_hash_chain(tokens, 4)
    assert len(whole) == 9
    for known in (0, 1, 8, 9):
        assert prompt_hash_chain(tokens, 4, whole[:known]) == whole


def test_an_aborted_sequences_written_chain_serves_the_request_that_resumes_it():
    """cache_written_blocks records the chain it walked; ResumedChains hands it once to a prompt of exactly the
    sequence's tokens, and forgets the oldest past its capacity."""
    bm = BlockManager(num_blocks=16, block_size=4)
    seq = make_seq(list(range(6)))
    bm.allocate(seq)
    bm.reserve(seq, 10)
    seq.token_ids.extend(range(50, 60))  # 16 tokens: blocks 0-2 written, the last token's KV not yet
    bm.cache_written_blocks(seq)
    tokens = seq.token_ids
    assert seq.written_block_hashes == prompt_hash_chain(tokens, 4)[:3]
    chains = ResumedChains(capacity=2)
    chains.remember(seq)
    assert chains.take(tokens[:-1]) == []  # other tokens: nothing
    assert chains.take(tokens) == seq.written_block_hashes and chains.take(tokens) == []  # taken once
    for row in range(3):
        other = make_seq(list(range(row, row + 9)), row=row + 1)
        bm.allocate(other)
        bm.cache_written_blocks(other)
        chains.remember(other)
    assert chains.take(array("q", range(0, 9))) == [] and len(chains.take(array("q", range(2, 11)))) == 2  # oldest gone
