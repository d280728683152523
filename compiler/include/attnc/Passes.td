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
    %out, %lse = attn.standard_attention %q, %k, %v scale %scale mask <causal> gqa 4 : ...
    ```
    After (one query tile, as `attnc emit --spec mask=causal,gqa=4,target=sm_80 --stage
    attn-online-softmax` prints it, 128 x 64 tiles; types left out):
    ```mlir
    %q_tile = attn.load_q_tile %q[%h, %q_start] tile_q 128 group 1 : ...
    %m, %l, %acc = attn.state_init like %q_tile : ...
    %state:3 = scf.for %j = %c0 to %num_kv_tiles step %c1
        iter_args(%m_old = %m, %l_old = %l, %acc_old = %acc) -> (...) {
      %kv_start = arith.muli %j, %c64 : index
      %k_tile = attn.load_kv_tile %k[%kv_head, %kv_start] : ...
      %v_tile = attn.load_kv_tile %v[%kv_head, %kv_start] : ...
      %s = attn.qk %q_tile, %k_tile scale %scale : ...
      %s_masked = attn.mask %s, %q_start, %kv_start, %q_len, %kv_len mask <causal> tile_q 128 : ...
      %m_new = attn.row_max %s_masked, %m_old : ...
      %alpha = attn.rescale_factor %m_old, %m_new : ...
      %p = attn.exp %s_masked, %m_new : ...
      %l_new, %acc_new = attn.accumulate %l_old, %acc_old, %alpha, %p, %v_tile : ...
      scf.yield %m_new, %l_new, %acc_new : ...
    } {attn.loop = "kv_tiles"}
    %o_tile = attn.normalize %state#1, %state#2 : ...
    ```
    The heads and query-tile loops carry the output (`%out_h`, `%out_i`),
    and the lse (`%lse_h`, `%lse_i`, written by `attn.lse`) only where the
    function returns it.

    Invariants after this pass:
    - no `attn.standard_attention` is left;
    - every KV-tile loop carries (m, l, acc) initialised by `attn.state_init`
      to (-inf, 0, 0), and its body rescales with `attn.rescale_factor`
      before `attn.accumulate`;
    - every score tile goes through `attn.mask` (the mask and the tail past
      kv_len), so the result equals textbook attention for every mask on
      rows that see a key in their first tile; a row whose first tiles the
      mask hides (a sliding window, more queries than keys) still computes
      exp(-inf - -inf) = NaN here, which `attn-safe-init` guards.
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
    -inf; out = 0 when l = 0 (and lse = m + log(0) = -inf). (The CUDA
    kernels take 0 as the exponent's reference while m is -inf, so their
    alpha there is exp2(-inf - 0) = 0, not 1: the same result, since l and
    acc are still 0.)

    Before / after:
    ```mlir
    %alpha = attn.rescale_factor %m_old, %m_new : tensor<?xf32>
    %alpha = attn.rescale_factor %m_old, %m_new inf_safe : tensor<?xf32>
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
    are never loaded. The loops' states print as `%state_partial_lead` (a
    sliding window's first, partial tiles), `%state_full` and
    `%state_partial`; without a sliding window there is no leading partial
    range, so two loops remain.

    Before:
    ```mlir
    %state:3 = scf.for %j = %c0 to %num_kv_tiles ... { ... attn.mask ... }
    ```
    After (causal):
    ```mlir
    %lo, %full_lo, %full_hi, %hi = attn.classify_tiles %q_start, %q_len, %kv_len mask <causal> tile_q 128 tile_kv 64
    %state_full:3 = scf.for %j = %full_lo to %full_hi step %c1
        iter_args(%m_old = %m, %l_old = %l, %acc_old = %acc) -> (...) {
      ... (no attn.mask)
    } {attn.loop = "kv_tiles", attn.tiles = "full"}
    %state_partial:3 = scf.for %j = %full_hi to %hi step %c1
        iter_args(%m_old = %state_full#0, %l_old = %state_full#1, %acc_old = %state_full#2) -> (...) {
      ... attn.mask ...
    } {attn.loop = "kv_tiles", attn.tiles = "partial"}
    ```

    Invariants after this pass: the KV-tile loops' bounds come from
    `attn.classify_tiles` (a query tile's loops together visit its tiles
    [lo, hi) and no other; where the mask hides nothing, the full loop may
    cover them all); `attn.mask` appears only in loops marked
    `attn.tiles = "partial"`; the state flows through the loops in key order.
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
    %out = scf.for %h = %c0 to %q_heads ... {
      %kv_head = arith.divui %h, %c4 : index
      %q_tile = attn.load_q_tile %q[%h, %q_start] tile_q 128 group 1 : ...
      ... attn.load_kv_tile %k[%kv_head, %kv_start] ...
    } {attn.loop = "heads"}
    ```
    After:
    ```mlir
    %kv_heads = arith.divui %q_heads, %c4 : index
    %out = scf.for %kv_head = %c0 to %kv_heads ... {
      %q_head = arith.muli %kv_head, %c4 : index
      %q_tile = attn.load_q_tile %q[%q_head, %q_start] tile_q 128 group 4 : ...
      ... attn.load_kv_tile %k[%kv_head, %kv_start] ...
    } {attn.gqa = 4 : i64, attn.loop = "heads"}
    ```

    Invariants after this pass: the heads loop runs over KV heads; every
    `attn.load_q_tile` and `attn.store_o_tile` in it has `group = gqa`; no
    per-head query-to-KV division (`h / G`) is left in the loop (only the
    KV head count, `%q_heads / G`, before it). Does nothing when gqa = 1.
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
    %k = attn.gather_pages %k_cache, %block_table, %kv_len : ...
    %k_tile = attn.load_kv_tile %k[%kv_head, %kv_start] : ...
    ```
    After:
    ```mlir
    %slots = attn.block_table_lookup %block_table[%kv_start], %kv_len page_size 16 : tensor<?xi32> -> tensor<64xindex>
    %k_tile = attn.load_paged_kv_tile %k_cache[%slots, %kv_head] : ...
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
    give the GPU enough parallel work. The KV-tile range of each query tile
    (from its first loop's lower bound to its last loop's upper bound:
    [full_lo, hi), or [lo, hi) under a sliding window) is partitioned by
    `attn.split_range`; a loop over splits (`attn.loop = "kv_splits"`) runs
    the chain of KV-tile loops on its own range from a fresh state, and
    `attn.merge` combines the partial (m, l, acc) into the running state with
    the same rescale rule. On the GPU a split is a thread block, or one of
    the two pipelines of a block; several splits of a (sequence, KV head)
    merge in a thread-block cluster where they fit, else through a merge
    kernel. `split_kv = auto` reads the number of splits from the function's
    `num_splits` argument; a number is a constant.

    After (causal decode, types left out):
    ```mlir
    %m, %l, %acc = attn.state_init like %q_tile : ...
    %lo, %full_lo, %full_hi, %hi = attn.classify_tiles ...
    %state:3 = scf.for %split = %c0 to %num_splits step %c1
        iter_args(%m_run = %m, %l_run = %l, %acc_run = %acc) -> (...) {
      %split_lo, %split_hi = attn.split_range %full_lo, %hi, %split, %num_splits
      %m_split, %l_split, %acc_split = attn.state_init like %q_tile : ...
      %j_lo_full = arith.maxui %full_lo, %split_lo : index
      %1 = arith.minui %full_hi, %split_hi : index
      %j_hi_full = arith.maxui %j_lo_full, %1 : index
      %state_full:3 = scf.for %j = %j_lo_full to %j_hi_full step %c1
          iter_args(%m_old = %m_split, %l_old = %l_split, %acc_old = %acc_split) -> (...) { ... }
      ... %state_partial:3 = scf.for %j = %j_lo_partial to %j_hi_partial ... { ... }
      %m_merged, %l_merged, %acc_merged = attn.merge %m_run, %l_run, %acc_run,
          %state_partial#0, %state_partial#1, %state_partial#2 inf_safe : ...
      scf.yield %m_merged, %l_merged, %acc_merged : ...
    } {attn.loop = "kv_splits"}
    ```

    Invariants after this pass: in decode with split_kv != 1, every chain of
    KV-tile loops runs inside a `kv_splits` loop on its split's range and is
    followed by an `attn.merge`; the splits' ranges are disjoint and cover
    the query tile's range. Does nothing for prefill or split_kv = 1.

    The CUDA backend emits one decode kernel for every split count: the
    grid's x is the split, and the count is the launch's (its arguments'
    `num_splits`, else the spec's split_kv, else the runtime's choice for
    `auto`), so a `split_kv = 1` kernel still carries the merge it needs when
    a launch asks for splits. The IR shows the spec's count.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::scf::SCFDialect"];
}

#endif // ATTNC_PASSES_TD
