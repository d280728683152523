//===- AttnOps.td - Textbook and tile-level attention ops ---*- tablegen -*-===//

#ifndef ATTN_OPS_TD
#define ATTN_OPS_TD

include "attn/AttnDialect.td"
include "attn/AttnAttrs.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/OpAsmInterface.td"

class Attn_Op<string mnemonic, list<Trait> traits = []>
    : Op<Attn_Dialect, mnemonic, !listconcat(traits, [Pure])> {
  let hasVerifier = 1;
}

def RowTensor : TensorRankOf<[AnyFloat], [1]>;
def TileTensor : TensorRankOf<[AnyFloat], [2]>;
def HeadsTensor : TensorRankOf<[AnyFloat], [3]>;
def PagedCache : TensorRankOf<[AnyFloat], [4]>;
def BlockTable : TensorRankOf<[I32], [1]>;
def SlotVector : TensorRankOf<[Index], [1]>;

//===----------------------------------------------------------------------===//
// Textbook level
//===----------------------------------------------------------------------===//

def Attn_StandardAttentionOp : Attn_Op<"standard_attention", [DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "softmax(Q Kᵀ · scale) · V with the score matrix materialised";
  let description = [{
    Textbook attention for one sequence: for every query head `h` (sharing
    KV head `h / gqa`) it computes the full `q_len × kv_len` score matrix
    `S = Q Kᵀ · scale`, hides the keys the mask forbids (-inf), takes the
    row softmax (max, exp, sum, divide) and multiplies by V. Memory grows as
    N²; this is the form the passes start from. `lse` is the natural-log
    log-sum-exp of each row's scores; a row that sees no key gets output 0
    and lse -inf.

    Layouts: `q` is `[q_heads, q_len, head_dim]`, `k` and `v` are
    `[kv_heads, kv_len, head_dim]`, `out` has the shape of `q` and `lse` is
    `[q_heads, q_len]`.

    ```mlir
    %out, %lse = attn.standard_attention %q, %k, %v scale %scale mask <causal> gqa 4
        : tensor<?x?x128xbf16>, tensor<?x?x128xbf16>, tensor<?x?x128xbf16>, f32
        -> tensor<?x?x128xbf16>, tensor<?x?xf32>
    ```
  }];
  let arguments = (ins HeadsTensor:$q, HeadsTensor:$k, HeadsTensor:$v,
                   AnyFloat:$scale, Attn_MaskAttr:$mask, I64Attr:$gqa);
  let results = (outs HeadsTensor:$out, TensorRankOf<[AnyFloat], [2]>:$lse);
  let assemblyFormat = [{
    $q `,` $k `,` $v `scale` $scale `mask` $mask `gqa` $gqa attr-dict `:`
    type($q) `,` type($k) `,` type($v) `,` type($scale) `->` type($out) `,` type($lse)
  }];
}

def Attn_GatherPagesOp : Attn_Op<"gather_pages"> {
  let summary = "Copies a sequence's pages into one contiguous K or V";
  let description = [{
    Materialises the logical `[kv_heads, kv_len, head_dim]` tensor of one
    sequence from a paged cache `[num_pages, page_size, kv_heads, head_dim]`:
    token `t` lives in page `block_table[t / page_size]` at slot
    `t % page_size`. This is what textbook attention needs before it can
    start; `attn-page-kv` removes it by reading each KV tile through the
    block table instead.

    ```mlir
    %k = attn.gather_pages %k_cache, %block_table, %kv_len
        : tensor<?x16x?x128xbf16>, tensor<?xi32> -> tensor<?x?x128xbf16>
    ```
  }];
  let arguments = (ins PagedCache:$cache, BlockTable:$block_table, Index:$kv_len);
  let results = (outs HeadsTensor:$result);
  let assemblyFormat = [{
    $cache `,` $block_table `,` $kv_len attr-dict `:` type($cache) `,`
    type($block_table) `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Tile level: loads and stores
//===----------------------------------------------------------------------===//

def Attn_LoadQTileOp : Attn_Op<"load_q_tile"> {
  let summary = "Loads the query rows of one tile (of a GQA group of heads)";
  let description = [{
    Loads `tile_q` query positions starting at `q_start` for the `group`
    query heads starting at `head`, packed head-major: row `r` holds head
    `head + r / tile_q` at position `q_start + r % tile_q`. Positions at or
    past `q_len` read as zero. `group` is 1 until `attn-share-kv-heads`
    packs the heads that share a KV head into one tile.

    ```mlir
    %qt = attn.load_q_tile %q[%h, %q0] tile_q 128 group 4 : tensor<?x?x128xbf16> -> tensor<?x128xbf16>
    ```
  }];
  let arguments = (ins HeadsTensor:$source, Index:$head, Index:$q_start,
                   I64Attr:$tile_q, I64Attr:$group);
  let results = (outs TileTensor:$result);
  let assemblyFormat = [{
    $source `[` $head `,` $q_start `]` `tile_q` $tile_q `group` $group attr-dict
    `:` type($source) `->` type($result)
  }];
}

def Attn_StoreOTileOp : Attn_Op<"store_o_tile", [AllTypesMatch<["dest", "result"]>]> {
  let summary = "Writes an output (or lse) tile back, dropping rows past q_len";
  let description = [{
    The inverse of `attn.load_q_tile`: row `r` of `tile` goes to head
    `head + r / tile_q`, position `q_start + r % tile_q` of `dest`, converted
    to the element type of `dest`. Rows at or past `q_len` are dropped. A
    rank-2 tile writes into `[heads, q_len, head_dim]`, a rank-1 (lse) tile
    into `[heads, q_len]`.

    ```mlir
    %o2 = attn.store_o_tile %ot into %o[%h, %q0] tile_q 128 group 1 : tensor<?x128xf32> into tensor<?x?x128xbf16>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$tile, AnyRankedTensor:$dest, Index:$head,
                   Index:$q_start, I64Attr:$tile_q, I64Attr:$group);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $tile `into` $dest `[` $head `,` $q_start `]` `tile_q` $tile_q `group` $group
    attr-dict `:` type($tile) `into` type($dest)
  }];
}

def Attn_LoadKVTileOp : Attn_Op<"load_kv_tile"> {
  let summary = "Loads one tile of keys or values from a contiguous cache";
  let description = [{
    Loads rows `[kv_start, kv_start + tile_kv)` of KV head `head`; the tile
    size is the static leading size of the result. Rows at or past the
    cache's length read as zero, so padding never brings NaN in.

    ```mlir
    %kt = attn.load_kv_tile %k[%hk, %k0] : tensor<?x?x128xbf16> -> tensor<64x128xbf16>
    ```
  }];
  let arguments = (ins HeadsTensor:$source, Index:$head, Index:$kv_start);
  let results = (outs TileTensor:$result);
  let assemblyFormat = [{
    $source `[` $head `,` $kv_start `]` attr-dict `:` type($source) `->` type($result)
  }];
}

def Attn_BlockTableLookupOp : Attn_Op<"block_table_lookup"> {
  let summary = "Maps a KV tile's tokens to cache slots through the block table";
  let description = [{
    The only place the block table is read. For each token
    `t = kv_start + i` of a tile of `size(result)` tokens it returns the
    physical slot `block_table[t / page_size] * page_size + t % page_size`,
    or -1 for tokens at or past `kv_len`. A tile may span several pages and
    pages may be any size.

    ```mlir
    %slots = attn.block_table_lookup %bt[%k0], %kv_len page_size 16 : tensor<?xi32> -> tensor<64xindex>
    ```
  }];
  let arguments = (ins BlockTable:$block_table, Index:$kv_start, Index:$kv_len,
                   I64Attr:$page_size);
  let results = (outs SlotVector:$slots);
  let assemblyFormat = [{
    $block_table `[` $kv_start `]` `,` $kv_len `page_size` $page_size attr-dict
    `:` type($block_table) `->` type($slots)
  }];
}

def Attn_LoadPagedKVTileOp : Attn_Op<"load_paged_kv_tile"> {
  let summary = "Loads one KV tile from a paged cache at the given slots";
  let description = [{
    Row `i` of the result is `cache[slot / page_size, slot % page_size, head, :]`
    with `slot = slots[i]`; a slot of -1 reads as zero. The slots come from
    `attn.block_table_lookup`.

    ```mlir
    %kt = attn.load_paged_kv_tile %k_cache[%slots, %hk] : tensor<?x16x?x128xbf16>, tensor<64xindex> -> tensor<64x128xbf16>
    ```
  }];
  let arguments = (ins PagedCache:$cache, SlotVector:$slots, Index:$head);
  let results = (outs TileTensor:$result);
  let assemblyFormat = [{
    $cache `[` $slots `,` $head `]` attr-dict `:` type($cache) `,` type($slots)
    `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Tile level: the online-softmax recurrence
//===----------------------------------------------------------------------===//

def Attn_StateInitOp : Attn_Op<"state_init", [DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "The online-softmax state before the first KV tile";
  let description = [{
    Returns `m = -inf`, `l = 0` and `acc = 0` with one row per row of the
    query tile `like`. Starting `m` at -inf is what makes the first tile's
    rescale factor `exp(m_old - m_new)` zero; `attn-safe-init` makes sure a
    tile with no visible key does not turn that into `exp(-inf - -inf)`.

    ```mlir
    %m, %l, %acc = attn.state_init like %q_tile : tensor<?x128xbf16> -> tensor<?xf32>, tensor<?xf32>, tensor<?x128xf32>
    ```
    Inside `attn-split-kv`'s loop over splits (`attn.loop = "kv_splits"`)
    the results print as `%m_split, %l_split, %acc_split`: each split's
    fresh state.
  }];
  let arguments = (ins TileTensor:$like);
  let results = (outs RowTensor:$m, RowTensor:$l, TileTensor:$acc);
  let assemblyFormat = [{
    `like` $like attr-dict `:` type($like) `->` type($m) `,` type($l) `,` type($acc)
  }];
}

def Attn_QKOp : Attn_Op<"qk"> {
  let summary = "Scores of one tile: Q_tile K_tileᵀ · scale";
  let description = [{
    A `rows × tile_kv` score tile that never leaves registers / shared
    memory on the GPU, accumulated in the element type of `scale`.

    ```mlir
    %s = attn.qk %qt, %kt scale %scale : tensor<?x128xbf16>, tensor<64x128xbf16>, f32 -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins TileTensor:$q, TileTensor:$k, AnyFloat:$scale);
  let results = (outs TileTensor:$scores);
  let assemblyFormat = [{
    $q `,` $k `scale` $scale attr-dict `:` type($q) `,` type($k) `,` type($scale)
    `->` type($scores)
  }];
}

def Attn_MaskOp : Attn_Op<"mask", [AllTypesMatch<["scores", "result"]>]> {
  let summary = "Sets the scores of hidden keys to -inf";
  let description = [{
    Row `r` of the tile is query position `q_start + r % tile_q`, column `c`
    is key `kv_start + c`. Keys the mask hides, and keys at or past `kv_len`,
    become -inf. After `attn-mask-tiles` this op only remains on partial
    tiles; fully visible tiles skip it and fully masked tiles are not visited.

    ```mlir
    %s_masked = attn.mask %s, %q_start, %kv_start, %q_len, %kv_len mask <causal> tile_q 128 : tensor<?x64xf32>
    ```
  }];
  let arguments = (ins TileTensor:$scores, Index:$q_start, Index:$kv_start,
                   Index:$q_len, Index:$kv_len, Attn_MaskAttr:$mask, I64Attr:$tile_q);
  let results = (outs TileTensor:$result);
  let assemblyFormat = [{
    $scores `,` $q_start `,` $kv_start `,` $q_len `,` $kv_len `mask` $mask
    `tile_q` $tile_q attr-dict `:` type($scores)
  }];
}

def Attn_RowMaxOp : Attn_Op<"row_max", [AllTypesMatch<["m_old", "m_new"]>]> {
  let summary = "m_new = max(m_old, rowmax(scores))";
  let description = [{
    ```mlir
    %mn = attn.row_max %s, %m : tensor<?x64xf32>, tensor<?xf32>
    ```
  }];
  let arguments = (ins TileTensor:$scores, RowTensor:$m_old);
  let results = (outs RowTensor:$m_new);
  let assemblyFormat = "$scores `,` $m_old attr-dict `:` type($scores) `,` type($m_old)";
}

def Attn_RescaleFactorOp : Attn_Op<"rescale_factor",
    [AllTypesMatch<["m_old", "m_new", "alpha"]>]> {
  let summary = "alpha = exp(m_old - m_new), the online-softmax correction";
  let description = [{
    When a new tile raises a row's max, everything accumulated so far was
    exponentiated against a smaller max and must shrink by `alpha`. With
    `inf_safe` (set by `attn-safe-init`) a row whose `m_new` is still -inf
    (no visible key yet) gets `alpha = 1` instead of `exp(-inf - -inf) = NaN`.

    ```mlir
    %a = attn.rescale_factor %m, %mn inf_safe : tensor<?xf32>
    ```
  }];
  let arguments = (ins RowTensor:$m_old, RowTensor:$m_new, UnitAttr:$inf_safe);
  let results = (outs RowTensor:$alpha);
  let assemblyFormat = [{
    $m_old `,` $m_new (`inf_safe` $inf_safe^)? attr-dict `:` type($alpha)
  }];
  let hasVerifier = 0; // AllTypesMatch is the whole rule.
}

def Attn_ExpOp : Attn_Op<"exp", [AllTypesMatch<["scores", "p"]>]> {
  let summary = "p = exp(scores - m_new), row by row";
  let description = [{
    With `inf_safe`, a row whose `m_new` is -inf gives `p = 0` instead of
    `exp(-inf - -inf) = NaN`.

    ```mlir
    %p = attn.exp %s, %mn inf_safe : tensor<?x64xf32>, tensor<?xf32>
    ```
  }];
  let arguments = (ins TileTensor:$scores, RowTensor:$m_new, UnitAttr:$inf_safe);
  let results = (outs TileTensor:$p);
  let assemblyFormat = [{
    $scores `,` $m_new (`inf_safe` $inf_safe^)? attr-dict `:` type($scores) `,` type($m_new)
  }];
}

def Attn_AccumulateOp : Attn_Op<"accumulate", [DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>, AllTypesMatch<["l", "l_new"]>,
                                               AllTypesMatch<["acc", "acc_new"]>]> {
  let summary = "l = alpha·l + rowsum(p); acc = alpha·acc + p·V";
  let description = [{
    ```mlir
    %l_new, %acc_new = attn.accumulate %l_old, %acc_old, %alpha, %p, %v_tile
        : tensor<?xf32>, tensor<?x128xf32>, tensor<?xf32>, tensor<?x64xf32>, tensor<64x128xbf16>
    ```
  }];
  let arguments = (ins RowTensor:$l, TileTensor:$acc, RowTensor:$alpha,
                   TileTensor:$p, TileTensor:$v);
  let results = (outs RowTensor:$l_new, TileTensor:$acc_new);
  let assemblyFormat = [{
    $l `,` $acc `,` $alpha `,` $p `,` $v attr-dict `:` type($l) `,` type($acc) `,`
    type($alpha) `,` type($p) `,` type($v)
  }];
}

def Attn_NormalizeOp : Attn_Op<"normalize", [AllTypesMatch<["acc", "out"]>]> {
  let summary = "out = acc / l, the softmax denominator applied once";
  let description = [{
    With `inf_safe`, a row that saw no key (`l = 0`) gives 0 instead of
    `0 / 0 = NaN`.

    ```mlir
    %ot = attn.normalize %l, %acc inf_safe : tensor<?xf32>, tensor<?x128xf32>
    ```
  }];
  let arguments = (ins RowTensor:$l, TileTensor:$acc, UnitAttr:$inf_safe);
  let results = (outs TileTensor:$out);
  let assemblyFormat = [{
    $l `,` $acc (`inf_safe` $inf_safe^)? attr-dict `:` type($l) `,` type($acc)
  }];
}

def Attn_LseOp : Attn_Op<"lse", [AllTypesMatch<["m", "l", "lse"]>]> {
  let summary = "lse = m + log(l), natural log; -inf for a row that saw no key";
  let description = [{
    ```mlir
    %lt = attn.lse %m, %l : tensor<?xf32>
    ```
  }];
  let arguments = (ins RowTensor:$m, RowTensor:$l);
  let results = (outs RowTensor:$lse);
  let assemblyFormat = "$m `,` $l attr-dict `:` type($lse)";
  let hasVerifier = 0; // AllTypesMatch is the whole rule.
}

def Attn_MergeOp : Attn_Op<"merge", [DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>, AllTypesMatch<["m_a", "m_b", "m", "l_a", "l_b", "l"]>,
                                     AllTypesMatch<["acc_a", "acc_b", "acc"]>]> {
  let summary = "Combines two partial states over disjoint key ranges";
  let description = [{
    The rescale rule again: `m = max(m_a, m_b)`,
    `l = exp(m_a - m)·l_a + exp(m_b - m)·l_b`,
    `acc = exp(m_a - m)·acc_a + exp(m_b - m)·acc_b`. With `inf_safe`, a side
    whose `m` is -inf contributes 0 rather than NaN. Split-KV decoding merges
    the partial state of each split this way.

    ```mlir
    %m_merged, %l_merged, %acc_merged = attn.merge %m_run, %l_run, %acc_run, %m_b, %l_b, %acc_b inf_safe : tensor<?xf32>, tensor<?x128xf32>
    ```
  }];
  let arguments = (ins RowTensor:$m_a, RowTensor:$l_a, TileTensor:$acc_a,
                   RowTensor:$m_b, RowTensor:$l_b, TileTensor:$acc_b,
                   UnitAttr:$inf_safe);
  let results = (outs RowTensor:$m, RowTensor:$l, TileTensor:$acc);
  let assemblyFormat = [{
    $m_a `,` $l_a `,` $acc_a `,` $m_b `,` $l_b `,` $acc_b (`inf_safe` $inf_safe^)?
    attr-dict `:` type($m) `,` type($acc)
  }];
}

//===----------------------------------------------------------------------===//
// Tile level: which tiles to visit
//===----------------------------------------------------------------------===//

def Attn_ClassifyTilesOp : Attn_Op<"classify_tiles", [DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "Splits a query tile's KV tiles into masked, partial and visible";
  let description = [{
    For the query rows `[q_start, q_start + tile_q)` (rows at or past
    `q_len` ignored), returns tile indices `lo <= full_lo <= full_hi <= hi`:
    KV tiles in `[full_lo, full_hi)` are fully visible (no mask arithmetic
    needed), those in `[lo, full_lo)` and `[full_hi, hi)` are partial (some
    keys hidden, the tail tile past `kv_len` included), and the rest are
    fully masked and never visited.

    ```mlir
    %lo, %full_lo, %full_hi, %hi = attn.classify_tiles %q_start, %q_len, %kv_len mask <causal> tile_q 128 tile_kv 64
    ```
  }];
  let arguments = (ins Index:$q_start, Index:$q_len, Index:$kv_len,
                   Attn_MaskAttr:$mask, I64Attr:$tile_q, I64Attr:$tile_kv);
  let results = (outs Index:$lo, Index:$full_lo, Index:$full_hi, Index:$hi);
  let assemblyFormat = [{
    $q_start `,` $q_len `,` $kv_len `mask` $mask `tile_q` $tile_q `tile_kv` $tile_kv attr-dict
  }];
}

def Attn_SplitRangeOp : Attn_Op<"split_range", [DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "The KV tiles of one split: a near-equal partition of [lo, hi)";
  let description = [{
    Split `split` of `num_splits` gets tiles
    `[lo + split·n / num_splits, lo + (split + 1)·n / num_splits)` with
    `n = hi - lo`: contiguous, disjoint, covering `[lo, hi)`, sizes differing
    by at most one.

    ```mlir
    %split_lo, %split_hi = attn.split_range %lo, %hi, %split, %num_splits
    ```
  }];
  let arguments = (ins Index:$lo, Index:$hi, Index:$split, Index:$num_splits);
  let results = (outs Index:$split_lo, Index:$split_hi);
  let assemblyFormat = "$lo `,` $hi `,` $split `,` $num_splits attr-dict";
  let hasVerifier = 0; // Four indices: the operand types say it all.
}

#endif // ATTN_OPS_TD
