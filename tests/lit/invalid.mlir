// RUN: attn-opt %s --split-input-file --verify-diagnostics

// Every verifier rule of the attn dialect, one case each.

func.func @gqa_zero(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>, %s: f32) {
  // expected-error@+1 {{gqa must be >= 1, got 0}}
  %o, %l = attn.standard_attention %q, %k, %k scale %s mask #attn.mask<none> gqa 0 : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
  return
}

// -----

func.func @dynamic_head_dim(%q: tensor<?x?x?xf32>, %s: f32) {
  // expected-error@+1 {{head_dim (dimension 2 of q) must be static}}
  %o, %l = attn.standard_attention %q, %q, %q scale %s mask #attn.mask<none> gqa 1 : tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>, f32 -> tensor<?x?x?xf32>, tensor<?x?xf32>
  return
}

// -----

func.func @k_v_differ(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>, %v: tensor<4x?x64xf32>, %s: f32) {
  // expected-error@+1 {{k and v must have the same type}}
  %o, %l = attn.standard_attention %q, %k, %v scale %s mask #attn.mask<none> gqa 1 : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<4x?x64xf32>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
  return
}

// -----

func.func @head_dim_mismatch(%q: tensor<?x?x64xf32>, %k: tensor<?x?x32xf32>, %s: f32) {
  // expected-error@+1 {{head_dim of k (32) does not match head_dim of q (64)}}
  %o, %l = attn.standard_attention %q, %k, %k scale %s mask #attn.mask<none> gqa 1 : tensor<?x?x64xf32>, tensor<?x?x32xf32>, tensor<?x?x32xf32>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
  return
}

// -----

func.func @dtype_mismatch(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf16>, %s: f32) {
  // expected-error@+1 {{element type of k ('f16') does not match q ('f32')}}
  %o, %l = attn.standard_attention %q, %k, %k scale %s mask #attn.mask<none> gqa 1 : tensor<?x?x64xf32>, tensor<?x?x64xf16>, tensor<?x?x64xf16>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
  return
}

// -----

func.func @out_type(%q: tensor<?x?x64xf32>, %s: f32) {
  // expected-error@+1 {{out must have the type of q}}
  %o, %l = attn.standard_attention %q, %q, %q scale %s mask #attn.mask<none> gqa 1 : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32 -> tensor<?x?x64xf64>, tensor<?x?xf32>
  return
}

// -----

func.func @gqa_heads(%q: tensor<32x?x64xf32>, %k: tensor<8x?x64xf32>, %s: f32) {
  // expected-error@+1 {{gqa = 3 needs 24 query heads for 8 KV heads, q has 32}}
  %o, %l = attn.standard_attention %q, %k, %k scale %s mask #attn.mask<none> gqa 3 : tensor<32x?x64xf32>, tensor<8x?x64xf32>, tensor<8x?x64xf32>, f32 -> tensor<32x?x64xf32>, tensor<?x?xf32>
  return
}

// -----

func.func @lse_shape(%q: tensor<32x?x64xf32>, %s: f32) {
  // expected-error@+1 {{heads of lse (16) does not match heads of q (32)}}
  %o, %l = attn.standard_attention %q, %q, %q scale %s mask #attn.mask<none> gqa 1 : tensor<32x?x64xf32>, tensor<32x?x64xf32>, tensor<32x?x64xf32>, f32 -> tensor<32x?x64xf32>, tensor<16x?xf32>
  return
}

// -----

func.func @gather_dynamic_page(%c: tensor<?x?x?x64xf32>, %bt: tensor<?xi32>, %n: index) {
  // expected-error@+1 {{page size (dimension 1 of the cache) must be static}}
  %k = attn.gather_pages %c, %bt, %n : tensor<?x?x?x64xf32>, tensor<?xi32> -> tensor<?x?x64xf32>
  return
}

// -----

func.func @gather_head_dim(%c: tensor<?x16x?x64xf32>, %bt: tensor<?xi32>, %n: index) {
  // expected-error@+1 {{head_dim of result (128) does not match head_dim of cache (64)}}
  %k = attn.gather_pages %c, %bt, %n : tensor<?x16x?x64xf32>, tensor<?xi32> -> tensor<?x?x128xf32>
  return
}

// -----

func.func @gather_block_table_type(%c: tensor<?x16x?x64xf32>, %bt: tensor<?xi64>, %n: index) {
  // expected-error@+1 {{operand #1 must be 1D tensor of 32-bit signless integer values}}
  %k = attn.gather_pages %c, %bt, %n : tensor<?x16x?x64xf32>, tensor<?xi64> -> tensor<?x?x64xf32>
  return
}

// -----

func.func @q_tile_rows(%q: tensor<?x?x64xf32>, %h: index, %i: index) {
  // expected-error@+1 {{the result's rows (dimension 0) must be dynamic: up to tile_q * group = 32, fewer in a sequence's last tile}}
  %t = attn.load_q_tile %q[%h, %i] tile_q 8 group 4 : tensor<?x?x64xf32> -> tensor<16x64xf32>
  return
}

// -----

func.func @q_tile_group(%q: tensor<?x?x64xf32>, %h: index, %i: index) {
  // expected-error@+1 {{group must be >= 1, got 0}}
  %t = attn.load_q_tile %q[%h, %i] tile_q 8 group 0 : tensor<?x?x64xf32> -> tensor<?x64xf32>
  return
}

// -----

func.func @q_tile_head_dim(%q: tensor<?x?x64xf32>, %h: index, %i: index) {
  // expected-error@+1 {{head_dim of result (32) does not match head_dim of source (64)}}
  %t = attn.load_q_tile %q[%h, %i] tile_q 8 group 1 : tensor<?x?x64xf32> -> tensor<?x32xf32>
  return
}

// -----

func.func @store_rank(%t: tensor<?x64xf32>, %o: tensor<?x?xf32>, %h: index, %i: index) {
  // expected-error@+1 {{expected a rank-2 tile into a rank-3 output or a rank-1 tile into a rank-2 lse, got rank 2 into rank 2}}
  %r = attn.store_o_tile %t into %o[%h, %i] tile_q 8 group 1 : tensor<?x64xf32> into tensor<?x?xf32>
  return
}

// -----

func.func @store_head_dim(%t: tensor<?x64xf32>, %o: tensor<?x?x32xf32>, %h: index, %i: index) {
  // expected-error@+1 {{head_dim of tile (64) does not match head_dim of dest (32)}}
  %r = attn.store_o_tile %t into %o[%h, %i] tile_q 8 group 1 : tensor<?x64xf32> into tensor<?x?x32xf32>
  return
}

// -----

func.func @kv_tile_dynamic(%k: tensor<?x?x64xf32>, %h: index, %i: index) {
  // expected-error@+1 {{the tile size (dimension 0 of the result) must be static}}
  %t = attn.load_kv_tile %k[%h, %i] : tensor<?x?x64xf32> -> tensor<?x64xf32>
  return
}

// -----

func.func @kv_tile_empty(%k: tensor<?x?x64xf32>, %h: index, %i: index) {
  // expected-error@+1 {{the tile size (dimension 0 of the result) must be >= 1, got 0}}
  %t = attn.load_kv_tile %k[%h, %i] : tensor<?x?x64xf32> -> tensor<0x64xf32>
  return
}

// -----

func.func @q_tile_no_head_dim(%q: tensor<?x?x0xf32>, %h: index, %i: index) {
  // expected-error@+1 {{head_dim (dimension 1 of the result) must be >= 1, got 0}}
  %t = attn.load_q_tile %q[%h, %i] tile_q 4 group 1 : tensor<?x?x0xf32> -> tensor<?x0xf32>
  return
}

// -----

func.func @attention_no_head_dim(%q: tensor<?x?x0xf32>, %k: tensor<?x?x0xf32>, %s: f32) {
  // expected-error@+1 {{head_dim (dimension 2 of q) must be >= 1, got 0}}
  %o, %l = attn.standard_attention %q, %k, %k scale %s mask #attn.mask<none> gqa 1 : tensor<?x?x0xf32>, tensor<?x?x0xf32>, tensor<?x?x0xf32>, f32 -> tensor<?x?x0xf32>, tensor<?x?xf32>
  return
}

// -----

func.func @kv_tile_dtype(%k: tensor<?x?x64xf32>, %h: index, %i: index) {
  // expected-error@+1 {{element type of result ('f16') does not match source ('f32')}}
  %t = attn.load_kv_tile %k[%h, %i] : tensor<?x?x64xf32> -> tensor<16x64xf16>
  return
}

// -----

func.func @lookup_page_size(%bt: tensor<?xi32>, %i: index, %n: index) {
  // expected-error@+1 {{page_size must be >= 1, got 0}}
  %s = attn.block_table_lookup %bt[%i], %n page_size 0 : tensor<?xi32> -> tensor<16xindex>
  return
}

// -----

func.func @lookup_dynamic(%bt: tensor<?xi32>, %i: index, %n: index) {
  // expected-error@+1 {{the tile size (size of the slots) must be static}}
  %s = attn.block_table_lookup %bt[%i], %n page_size 16 : tensor<?xi32> -> tensor<?xindex>
  return
}

// -----

func.func @paged_tile_slots(%c: tensor<?x16x?x64xf32>, %s: tensor<16xindex>, %h: index) {
  // expected-error@+1 {{tile size of result (32) does not match tile size of slots (16)}}
  %t = attn.load_paged_kv_tile %c[%s, %h] : tensor<?x16x?x64xf32>, tensor<16xindex> -> tensor<32x64xf32>
  return
}

// -----

func.func @paged_tile_head_dim(%c: tensor<?x16x?x64xf32>, %s: tensor<16xindex>, %h: index) {
  // expected-error@+1 {{head_dim of result (128) does not match head_dim of cache (64)}}
  %t = attn.load_paged_kv_tile %c[%s, %h] : tensor<?x16x?x64xf32>, tensor<16xindex> -> tensor<16x128xf32>
  return
}

// -----

func.func @state_m_l(%q: tensor<?x64xf32>) {
  // expected-error@+1 {{m and l must have the same type}}
  %m, %l, %a = attn.state_init like %q : tensor<?x64xf32> -> tensor<?xf32>, tensor<?xf64>, tensor<?x64xf32>
  return
}

// -----

func.func @state_acc_type(%q: tensor<?x64xf32>) {
  // expected-error@+1 {{element type of acc ('f64') does not match m ('f32')}}
  %m, %l, %a = attn.state_init like %q : tensor<?x64xf32> -> tensor<?xf32>, tensor<?xf32>, tensor<?x64xf64>
  return
}

// -----

func.func @state_head_dim(%q: tensor<?x64xf32>) {
  // expected-error@+1 {{head_dim of acc (32) does not match head_dim of the query tile (64)}}
  %m, %l, %a = attn.state_init like %q : tensor<?x64xf32> -> tensor<?xf32>, tensor<?xf32>, tensor<?x32xf32>
  return
}

// -----

func.func @qk_head_dim(%q: tensor<?x64xf32>, %k: tensor<16x32xf32>, %s: f32) {
  // expected-error@+1 {{head_dim of k (32) does not match head_dim of q (64)}}
  %r = attn.qk %q, %k scale %s : tensor<?x64xf32>, tensor<16x32xf32>, f32 -> tensor<?x16xf32>
  return
}

// -----

func.func @qk_columns(%q: tensor<?x64xf32>, %k: tensor<16x64xf32>, %s: f32) {
  // expected-error@+1 {{columns of scores (32) does not match columns of rows of k (16)}}
  %r = attn.qk %q, %k scale %s : tensor<?x64xf32>, tensor<16x64xf32>, f32 -> tensor<?x32xf32>
  return
}

// -----

func.func @qk_scale_type(%q: tensor<?x64xf32>, %k: tensor<16x64xf32>, %s: f64) {
  // expected-error@+1 {{scores must have the element type of scale ('f64')}}
  %r = attn.qk %q, %k scale %s : tensor<?x64xf32>, tensor<16x64xf32>, f64 -> tensor<?x16xf32>
  return
}

// -----

func.func @mask_tile_q(%s: tensor<?x16xf32>, %i: index) {
  // expected-error@+1 {{tile_q must be >= 1, got 0}}
  %r = attn.mask %s, %i, %i, %i, %i mask #attn.mask<causal> tile_q 0 : tensor<?x16xf32>
  return
}

// -----

func.func @row_max_rows(%s: tensor<8x16xf32>, %m: tensor<4xf32>) {
  // expected-error@+1 {{rows of m_old (4) does not match rows of scores (8)}}
  %r = attn.row_max %s, %m : tensor<8x16xf32>, tensor<4xf32>
  return
}

// -----

func.func @rescale_types(%a: tensor<?xf32>, %b: tensor<?xf64>) {
  // expected-error@+1 {{failed to verify that all of {m_old, m_new, alpha} have same type}}
  %r = "attn.rescale_factor"(%a, %b) : (tensor<?xf32>, tensor<?xf64>) -> tensor<?xf32>
  return
}

// -----

func.func @exp_rows(%s: tensor<8x16xf32>, %m: tensor<4xf32>) {
  // expected-error@+1 {{rows of m_new (4) does not match rows of scores (8)}}
  %r = attn.exp %s, %m : tensor<8x16xf32>, tensor<4xf32>
  return
}

// -----

func.func @accumulate_columns(%l: tensor<?xf32>, %acc: tensor<?x64xf32>, %p: tensor<?x16xf32>, %v: tensor<32x64xf32>) {
  // expected-error@+1 {{columns of p (16) does not match columns of rows of v (32)}}
  %l2, %a2 = attn.accumulate %l, %acc, %l, %p, %v : tensor<?xf32>, tensor<?x64xf32>, tensor<?xf32>, tensor<?x16xf32>, tensor<32x64xf32>
  return
}

// -----

func.func @accumulate_head_dim(%l: tensor<?xf32>, %acc: tensor<?x64xf32>, %p: tensor<?x16xf32>, %v: tensor<16x32xf32>) {
  // expected-error@+1 {{head_dim of v (32) does not match head_dim of acc (64)}}
  %l2, %a2 = attn.accumulate %l, %acc, %l, %p, %v : tensor<?xf32>, tensor<?x64xf32>, tensor<?xf32>, tensor<?x16xf32>, tensor<16x32xf32>
  return
}

// -----

func.func @normalize_types(%l: tensor<?xf64>, %acc: tensor<?x64xf32>) {
  // expected-error@+1 {{element type of l ('f64') does not match acc ('f32')}}
  %o = attn.normalize %l, %acc : tensor<?xf64>, tensor<?x64xf32>
  return
}

// -----

func.func @merge_acc_type(%m: tensor<?xf32>, %acc: tensor<?x64xf64>) {
  // expected-error@+1 {{element type of acc ('f64') does not match m ('f32')}}
  %a, %b, %c = attn.merge %m, %m, %acc, %m, %m, %acc : tensor<?xf32>, tensor<?x64xf64>
  return
}

// -----

func.func @classify_tile_kv(%i: index) {
  // expected-error@+1 {{tile_kv must be >= 1, got 0}}
  %a, %b, %c, %d = attn.classify_tiles %i, %i, %i mask #attn.mask<causal> tile_q 16 tile_kv 0
  return
}

// -----

// The spec attribute goes through the spec validator.

// expected-error@+1 {{invalid spec: head_dim = 100: must be a multiple of 16 on target = sm_90a}}
func.func @bad_spec() attributes {attn.spec = #attn.spec<head_dim = 100>} {
  return
}

// -----

// expected-error@+1 {{invalid spec: 'tile' = '16': unknown field}}
func.func @unknown_field() attributes {attn.spec = #attn.spec<tile = 16>} {
  return
}

// -----

func.func @bad_window(%s: tensor<?x16xf32>, %i: index) {
  // expected-error@+1 {{invalid spec: mask = sliding_window(0): the window must be >= 1 key}}
  %r = attn.mask %s, %i, %i, %i, %i mask #attn.mask<sliding_window(0)> tile_q 1 : tensor<?x16xf32>
  return
}

// -----

func.func @gather_zero_page(%c: tensor<?x0x?x64xf32>, %bt: tensor<?xi32>, %n: index) {
  // expected-error@+1 {{page size (dimension 1 of the cache) must be >= 1, got 0}}
  %k = attn.gather_pages %c, %bt, %n : tensor<?x0x?x64xf32>, tensor<?xi32> -> tensor<?x?x64xf32>
  return
}

// -----

func.func @paged_tile_zero_page(%c: tensor<?x0x?x64xf32>, %s: tensor<16xindex>, %h: index) {
  // expected-error@+1 {{page size (dimension 1 of the cache) must be >= 1, got 0}}
  %t = attn.load_paged_kv_tile %c[%s, %h] : tensor<?x0x?x64xf32>, tensor<16xindex> -> tensor<16x64xf32>
  return
}

// -----

func.func @q_tile_rows_overflow(%q: tensor<?x?x128xbf16>, %h: index, %q0: index) {
  // expected-error@+1 {{tile_q * group = 4611686018427387904 * 4 is larger than 2^31 rows}}
  %qt = attn.load_q_tile %q[%h, %q0] tile_q 4611686018427387904 group 4 : tensor<?x?x128xbf16> -> tensor<0x128xbf16>
  return
}

// -----

// A spec attribute without its field list is a parse error, not the default spec.
// expected-error@+1 {{expected '<'}}
func.func @spec_without_fields() attributes {attn.spec = #attn.spec} {
  return
}

// -----

func.func @static_lengths(%q: tensor<2x16x64xf32>, %s: f32) {
  // expected-error@+1 {{dimension 0 of q (heads) must be dynamic: the kernels take it at run time}}
  %o, %l = attn.standard_attention %q, %q, %q scale %s mask #attn.mask<none> gqa 1 : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, f32 -> tensor<2x16x64xf32>, tensor<2x16xf32>
  return
}

// -----

func.func @qk_dynamic_key_tile(%qt: tensor<?x128xf32>, %kt: tensor<?x128xf32>, %s: f32) {
  // expected-error@+1 {{the key tile (dimension 0 of k) must be static}}
  %sc = attn.qk %qt, %kt scale %s : tensor<?x128xf32>, tensor<?x128xf32>, f32 -> tensor<?x?xf32>
  return
}

// -----

func.func @state_init_dynamic_head_dim(%qt: tensor<?x?xf32>) {
  // expected-error@+1 {{head_dim (dimension 1 of the query tile) must be static}}
  %m, %l, %acc = attn.state_init like %qt : tensor<?x?xf32> -> tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
  return
}

// -----

// The function's attn.spec and the ops inside it must describe the same kernel.
func.func @spec_gqa_disagrees(%q: tensor<?x?x64xf32>, %s: f32) -> tensor<?x?x64xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, gqa = 4>} {
  // expected-error@+1 {{the op says gqa 1 but the function's attn.spec says gqa = 4}}
  %o, %l = attn.standard_attention %q, %q, %q scale %s mask #attn.mask<none> gqa 1 : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
  return %o : tensor<?x?x64xf32>
}

// -----

func.func @spec_head_dim_disagrees(%q: tensor<?x?x64xf32>, %s: f32) -> tensor<?x?x64xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 128>} {
  // expected-error@+1 {{q has head_dim 64 but the function's attn.spec says head_dim = 128}}
  %o, %l = attn.standard_attention %q, %q, %q scale %s mask #attn.mask<none> gqa 1 : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
  return %o : tensor<?x?x64xf32>
}

// -----

func.func @spec_dtype_disagrees(%q: tensor<?x?x64xf32>, %s: f32) -> tensor<?x?x64xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, dtype = f64>} {
  // expected-error@+1 {{q holds 'f32' but the function's attn.spec says dtype = f64}}
  %o, %l = attn.standard_attention %q, %q, %q scale %s mask #attn.mask<none> gqa 1 : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
  return %o : tensor<?x?x64xf32>
}

// -----

func.func @spec_mask_disagrees(%q: tensor<?x?x64xf32>, %s: f32) -> tensor<?x?x64xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, mask = sliding_window(8)>} {
  // expected-error@+1 {{the op's mask is causal but the function's attn.spec says mask = sliding_window(8)}}
  %o, %l = attn.standard_attention %q, %q, %q scale %s mask #attn.mask<causal> gqa 1 : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
  return %o : tensor<?x?x64xf32>
}

// -----

func.func @spec_paged_but_contiguous(%q: tensor<?x?x64xf32>, %s: f32) -> tensor<?x?x64xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, page_size = 16>} {
  // expected-error@+1 {{k is not read through a block table (attn.gather_pages) but the function's attn.spec says page_size = 16}}
  %o, %l = attn.standard_attention %q, %q, %q scale %s mask #attn.mask<none> gqa 1 : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
  return %o : tensor<?x?x64xf32>
}

// -----

func.func @spec_contiguous_but_paged(%q: tensor<?x?x64xf32>, %kc: tensor<?x16x?x64xf32>, %t: tensor<?xi32>, %n: index, %s: f32) -> tensor<?x?x64xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64>} {
  // expected-error@+1 {{attn.gather_pages reads the cache through a block table but the function's attn.spec says page_size = 0 (a contiguous cache)}}
  %k = attn.gather_pages %kc, %t, %n : tensor<?x16x?x64xf32>, tensor<?xi32> -> tensor<?x?x64xf32>
  %o, %l = attn.standard_attention %q, %k, %k scale %s mask #attn.mask<none> gqa 1 : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
  return %o : tensor<?x?x64xf32>
}

// -----

func.func @spec_page_size_disagrees(%kc: tensor<?x32x?x64xf32>, %t: tensor<?xi32>, %n: index) -> tensor<?x?x64xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, page_size = 16>} {
  // expected-error@+1 {{the cache has pages of 32 tokens but the function's attn.spec says page_size = 16}}
  %k = attn.gather_pages %kc, %t, %n : tensor<?x32x?x64xf32>, tensor<?xi32> -> tensor<?x?x64xf32>
  return %k : tensor<?x?x64xf32>
}

// -----

// The tile-level ops carry the spec's sizes: an op edited to say otherwise is refused.
func.func @tiles_page_size_disagrees(%t: tensor<?xi32>, %n: index) -> tensor<16xindex>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, tile_q = 16, tile_kv = 16, page_size = 4>} {
  // expected-error@+1 {{the op says page_size 8 but the function's attn.spec says page_size = 4}}
  %slots = attn.block_table_lookup %t[%n], %n page_size 8 : tensor<?xi32> -> tensor<16xindex>
  return %slots : tensor<16xindex>
}

// -----

func.func @tiles_cache_pages_disagree(%kc: tensor<?x8x?x64xf32>, %slots: tensor<16xindex>, %h: index) -> tensor<16x64xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, tile_q = 16, tile_kv = 16, page_size = 4>} {
  // expected-error@+1 {{the cache has pages of 8 tokens but the function's attn.spec says page_size = 4}}
  %kt = attn.load_paged_kv_tile %kc[%slots, %h] : tensor<?x8x?x64xf32>, tensor<16xindex> -> tensor<16x64xf32>
  return %kt : tensor<16x64xf32>
}

// -----

func.func @tiles_group_disagrees(%q: tensor<?x?x64xf32>, %h: index) -> tensor<?x?x64xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, tile_q = 16, tile_kv = 16, gqa = 2>} {
  %qt = attn.load_q_tile %q[%h, %h] tile_q 16 group 2 : tensor<?x?x64xf32> -> tensor<?x64xf32>
  // expected-error@+1 {{the op says group 3 but the function's attn.spec says group = 2}}
  %o = attn.store_o_tile %qt into %q[%h, %h] tile_q 16 group 3 : tensor<?x64xf32> into tensor<?x?x64xf32>
  return %o : tensor<?x?x64xf32>
}

// -----

func.func @tiles_groups_differ(%q: tensor<?x?x64xf32>, %h: index) -> tensor<?x?x64xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, tile_q = 16, tile_kv = 16, gqa = 2>} {
  %qt = attn.load_q_tile %q[%h, %h] tile_q 16 group 2 : tensor<?x?x64xf32> -> tensor<?x64xf32>
  // expected-error@+1 {{the op says group 1 but another query/output tile op of the function says group 2}}
  %o = attn.store_o_tile %qt into %q[%h, %h] tile_q 16 group 1 : tensor<?x64xf32> into tensor<?x?x64xf32>
  return %o : tensor<?x?x64xf32>
}

// -----

func.func @tiles_tile_q_disagrees(%q: tensor<?x?x64xf32>, %h: index) -> tensor<?x64xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, tile_q = 16, tile_kv = 16>} {
  // expected-error@+1 {{the op says tile_q 32 but the function's attn.spec says tile_q = 16}}
  %qt = attn.load_q_tile %q[%h, %h] tile_q 32 group 1 : tensor<?x?x64xf32> -> tensor<?x64xf32>
  return %qt : tensor<?x64xf32>
}

// -----

func.func @tiles_tile_kv_disagrees(%i: index, %n: index) -> index
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, tile_q = 16, tile_kv = 16, mask = causal>} {
  // expected-error@+1 {{the op says tile_kv 32 but the function's attn.spec says tile_kv = 16}}
  %lo, %full_lo, %full_hi, %hi = attn.classify_tiles %i, %n, %n mask <causal> tile_q 16 tile_kv 32
  return %lo : index
}

// -----

func.func @tiles_key_tile_disagrees(%qt: tensor<?x64xf32>, %kt: tensor<32x64xf32>, %s: f32) -> tensor<?x32xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, tile_q = 16, tile_kv = 16>} {
  // expected-error@+1 {{the key tile has 32 keys but the function's attn.spec says tile_kv = 16}}
  %sc = attn.qk %qt, %kt scale %s : tensor<?x64xf32>, tensor<32x64xf32>, f32 -> tensor<?x32xf32>
  return %sc : tensor<?x32xf32>
}

// -----

func.func @tiles_mask_disagrees(%sc: tensor<?x16xf32>, %n: index) -> tensor<?x16xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, tile_q = 16, tile_kv = 16>} {
  // expected-error@+1 {{the op's mask is causal but the function's attn.spec says mask = none}}
  %m = attn.mask %sc, %n, %n, %n, %n mask #attn.mask<causal> tile_q 16 : tensor<?x16xf32>
  return %m : tensor<?x16xf32>
}

// -----

// The lowering takes rows at run time (a sequence's last tile has fewer) and head_dim as given.
func.func @lse_static(%q: tensor<?x?x64xf32>, %s: f32) -> tensor<4x8xf32> {
  // expected-error@+1 {{dimension 0 of lse (heads) must be dynamic: the kernels take it at run time}}
  %o, %l = attn.standard_attention %q, %q, %q scale %s mask #attn.mask<none> gqa 1 : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32 -> tensor<?x?x64xf32>, tensor<4x8xf32>
  return %l : tensor<4x8xf32>
}

// -----

func.func @state_rows_static(%qt: tensor<8x32xf32>) {
  // expected-error@+1 {{the query tile's rows (dimension 0) must be dynamic}}
  %m, %l, %acc = attn.state_init like %qt : tensor<8x32xf32> -> tensor<8xf32>, tensor<8xf32>, tensor<8x32xf32>
  return
}

// -----

func.func @kv_head_dim_dynamic(%k: tensor<?x?x32xf32>, %h: index) -> tensor<8x?xf32> {
  // expected-error@+1 {{head_dim (dimension 1 of the result) must be static}}
  %t = attn.load_kv_tile %k[%h, %h] : tensor<?x?x32xf32> -> tensor<8x?xf32>
  return %t : tensor<8x?xf32>
}

// -----

func.func @o_tile_head_dim_dynamic(%t: tensor<?x?xf32>, %o: tensor<?x?x32xf32>, %h: index) -> tensor<?x?x32xf32> {
  // expected-error@+1 {{head_dim (dimension 1 of the tile) must be static}}
  %r = attn.store_o_tile %t into %o[%h, %h] tile_q 4 group 1 : tensor<?x?xf32> into tensor<?x?x32xf32>
  return %r : tensor<?x?x32xf32>
}

// -----

// expected-error@+1 {{attn.spec belongs on the function of the kernel it describes}}
module attributes {attn.spec = #attn.spec<target = cpu>} {
}

// -----

// expected-error@+1 {{attn.spec must be an #attn.spec<...> attribute, got 3 : i64}}
func.func @spec_not_a_spec() attributes {attn.spec = 3} {
  return
}
