//===- Passes.td - The attnc passes, one FlashAttention idea each -*- tablegen -*-===//
//
// The pipeline runs them in this order (see Pipeline.cpp). Each pass reads
// the kernel's spec from the `attn.spec` attribute of its function.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_PASSES_TD
#define ATTNC_PASSES_TD

include "mlir/Pass/PassBase.td"

def OnlineSoftmax : Pass<"attn-online-softmax", "::mlir::func::FuncOp"> {
  let summary = "Tile the KV sequence and replace the softmax by the online recurrence";
  let description = [{
    Rewrites `attn.standard_attention` into loops: over query heads
    (`attn.loop = "heads"`), over query tiles (`"q_tiles"`) and over KV
    tiles (`"kv_tiles"`). The KV loop carries the online-softmax state
    (m, l, acc) and inserts the rescale `alpha = exp(m_old - m_new)`, so the
    `q_len × kv_len` score matrix is never built: only one
    `tile_q × tile_kv` tile of it exists at a time.

    Before:
    ```mlir
    %o, %lse = attn.standard_attention %q, %k, %v scale %s mask #attn.mask<causal> gqa 4 : ...
    ```
    After (one query tile):
    ```mlir
    %qt = attn.load_q_tile %q[%h, %q0] tile_q 128 group 1 : ...
    %m0, %l0, %acc0 = attn.state_init like %qt : ...
    %r:3 = scf.for %j = %c0 to %nkt step %c1 iter_args(%m = %m0, %l = %l0, %acc = %acc0) {
      %kt = attn.load_kv_tile %k[%hk, %k0] : ...
      %vt = attn.load_kv_tile %v[%hk, %k0] : ...
      %s  = attn.qk %qt, %kt scale %scale : ...
      %sm = attn.mask %s, %q0, %k0, %nq, %nkv mask #attn.mask<causal> tile_q 128 : ...
      %mn = attn.row_max %sm, %m : ...
      %a  = attn.rescale_factor %m, %mn : ...
      %p  = attn.exp %sm, %mn : ...
      %l2, %acc2 = attn.accumulate %l, %acc, %a, %p, %vt : ...
      scf.yield %mn, %l2, %acc2 : ...
    } {attn.loop = "kv_tiles"}
    %ot = attn.normalize %r#1, %r#2 : ...
    ```

    Invariants after this pass:
    - no `attn.standard_attention` is left;
    - every KV-tile loop carries (m, l, acc) initialised by `attn.state_init`
      to (-inf, 0, 0), and its body rescales with `attn.rescale_factor`
      before `attn.accumulate`;
    - every score tile goes through `attn.mask` (the mask and the tail past
      kv_len), so the result equals textbook attention for every mask.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect"];
}

def SafeInit : Pass<"attn-safe-init", "::mlir::func::FuncOp"> {
  let summary = "Guard the recurrence against exp(-inf - -inf) and 0 / 0";
  let description = [{
    `m` starts at -inf. A row whose first tiles are fully masked still has
    `m_new = -inf` after them, and the plain formulas give
    `alpha = exp(-inf - -inf) = NaN`, `p = exp(-inf - -inf) = NaN` and, for
    a row that never sees a key, `out = 0 / 0 = NaN`. This pass marks the
    ops where that happens `inf_safe`: alpha = 1 and p = 0 while m_new is
    -inf; out = 0 when l = 0 (and lse = m + log(0) = -inf).

    Before / after:
    ```mlir
    %a = attn.rescale_factor %m, %mn : tensor<?xf32>
    %a = attn.rescale_factor %m, %mn inf_safe : tensor<?xf32>
    ```

    Invariants after this pass: every `attn.rescale_factor`, `attn.exp`,
    `attn.normalize` and `attn.merge` is `inf_safe`, so a fully masked row
    ends with l = 0, output 0 and lse = -inf, and no NaN is produced.
  }];
}

def MaskTiles : Pass<"attn-mask-tiles", "::mlir::func::FuncOp"> {
  let summary = "Skip fully masked KV tiles and drop the mask from fully visible ones";
  let description = [{
    Classifies the KV tiles of each query tile with `attn.classify_tiles`
    and splits each KV-tile loop that applies `attn.mask` into consecutive
    loops over the tile ranges: partial tiles (mask kept), fully visible
    tiles (mask removed, `attn.tiles = "full"`), partial tiles again. Fully
    masked tiles fall outside every range: the loop bounds shrink and they
    are never loaded. Without a sliding window there is no leading partial
    range, so two loops remain.

    Before:
    ```mlir
    %r:3 = scf.for %j = %c0 to %nkt ... { ... attn.mask ... }
    ```
    After (causal):
    ```mlir
    %lo, %flo, %fhi, %hi = attn.classify_tiles %q0, %nq, %nkv mask #attn.mask<causal> tile_q 128 tile_kv 64
    %a:3 = scf.for %j = %flo to %fhi ... { (no attn.mask) } {attn.tiles = "full"}
    %b:3 = scf.for %j = %fhi to %hi ... iter_args(%a#0, %a#1, %a#2) { attn.mask ... } {attn.tiles = "partial"}
    ```

    Invariants after this pass: no KV-tile loop spans the whole KV range;
    `attn.mask` appears only in loops marked `attn.tiles = "partial"`; the
    state flows through the loops in key order.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::scf::SCFDialect"];
}

def ShareKVHeads : Pass<"attn-share-kv-heads", "::mlir::func::FuncOp"> {
  let summary = "GQA: process the query heads that share a KV head against one load of each KV tile";
  let description = [{
    With `gqa = G`, query heads `G·hk .. G·hk + G - 1` read the same KV head
    `hk`. The heads loop is rewritten to run over KV heads; each query tile
    packs the tiles of the G query heads (`group G`, G·tile_q rows), so each
    K and V tile is loaded once for the whole group instead of G times.

    Before:
    ```mlir
    scf.for %h = %c0 to %hq ... {
      %hk = arith.divui %h, %c4 : index
      %qt = attn.load_q_tile %q[%h, %q0] tile_q 64 group 1 : ...
      ... attn.load_kv_tile %k[%hk, %k0] ...
    } {attn.loop = "heads"}
    ```
    After:
    ```mlir
    scf.for %hk = %c0 to %hkv ... {
      %h = arith.muli %hk, %c4 : index
      %qt = attn.load_q_tile %q[%h, %q0] tile_q 64 group 4 : ...
      ... attn.load_kv_tile %k[%hk, %k0] ...
    } {attn.loop = "heads", attn.gqa = 4}
    ```

    Invariants after this pass: the heads loop runs over KV heads; every
    `attn.load_q_tile` and `attn.store_o_tile` in it has `group = gqa`; no
    query-to-KV head division is left. Does nothing when gqa = 1.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def PageKV : Pass<"attn-page-kv", "::mlir::func::FuncOp"> {
  let summary = "Read every KV tile through the block table";
  let description = [{
    Replaces each `attn.load_kv_tile` of a tensor made by `attn.gather_pages`
    with one `attn.block_table_lookup` of the tile's slots (shared by the K
    and V loads of the same tile) and `attn.load_paged_kv_tile` from the
    cache. The gathered copy of the whole sequence then has no use and is
    erased: the kernel reads the paged cache in place.

    Before:
    ```mlir
    %k = attn.gather_pages %k_cache, %bt, %nkv : ...
    %kt = attn.load_kv_tile %k[%hk, %k0] : ...
    ```
    After:
    ```mlir
    %slots = attn.block_table_lookup %bt[%k0], %nkv page_size 16 : tensor<?xi32> -> tensor<64xindex>
    %kt = attn.load_paged_kv_tile %k_cache[%slots, %hk] : ...
    ```

    Invariants after this pass: no `attn.gather_pages` and no
    `attn.load_kv_tile` of a paged cache remain; the block table is read
    only by `attn.block_table_lookup`, once per KV tile.
  }];
}

def SplitKV : Pass<"attn-split-kv", "::mlir::func::FuncOp"> {
  let summary = "Decode: partition the KV tiles into splits and merge their partial states";
  let description = [{
    For `mode = decode` (a few query rows, long KV), one query tile does not
    give the GPU enough parallel work. The KV-tile range [lo, hi) of each
    query tile is partitioned by `attn.split_range`; a loop over splits
    (`attn.loop = "kv_splits"`, one thread block each on the GPU) runs the
    KV-tile loops on its own range from a fresh state, and `attn.merge`
    combines the partial (m, l, acc) into the running state with the same
    rescale rule. `split_kv = auto` reads the number of splits from the
    function's `num_splits` argument; a number is a constant.

    After:
    ```mlir
    %m0, %l0, %acc0 = attn.state_init like %qt : ...
    %r:3 = scf.for %sp = %c0 to %ns ... iter_args(%m = %m0, %l = %l0, %acc = %acc0) {
      %slo, %shi = attn.split_range %lo, %hi, %sp, %ns
      %pm0, %pl0, %pacc0 = attn.state_init like %qt : ...
      %p:3 = scf.for %j = max(%lo, %slo) to min(%hi, %shi) ... { ... }
      %m2, %l2, %acc2 = attn.merge %m, %l, %acc, %p#0, %p#1, %p#2 inf_safe : ...
      scf.yield %m2, %l2, %acc2 : ...
    } {attn.loop = "kv_splits"}
    ```

    Invariants after this pass: in decode, every chain of KV-tile loops runs
    inside a `kv_splits` loop on its split's range and is followed by an
    `attn.merge`; the splits' ranges are disjoint and cover [lo, hi). Does
    nothing for prefill or split_kv = 1.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::scf::SCFDialect"];
}

#endif // ATTNC_PASSES_TD
