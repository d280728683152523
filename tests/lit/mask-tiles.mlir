// RUN: attn-opt %s --split-input-file --attn-mask-tiles | FileCheck %s

// Causal: fully visible tiles first (no mask arithmetic), then the diagonal
// (and tail) tiles with the mask. Tiles past the diagonal are outside both
// ranges: the loops never visit them.

// CHECK-LABEL: func.func @causal
// CHECK-SAME:    %[[Q0:[a-z0-9_]+]]: index, %[[NQ:[a-z0-9_]+]]: index, %[[NKV:[a-z0-9_]+]]: index
// CHECK:         %[[LO:[a-z0-9_]+]], %[[FLO:[a-z0-9_]+]], %[[FHI:[a-z0-9_]+]], %[[HI:[a-z0-9_]+]] = attn.classify_tiles %[[Q0]], %[[NQ]], %[[NKV]] mask <causal> tile_q 16 tile_kv 32
// CHECK:         %[[FULL:.+]]:3 = scf.for %{{.+}} = %[[FLO]] to %[[FHI]] step %c1 iter_args(%{{.+}} = %m, %{{.+}} = %l, %{{.+}} = %acc)
// CHECK-NOT:       attn.mask
// CHECK:         } {attn.loop = "kv_tiles", attn.tiles = "full"}
// CHECK:         %[[PART:.+]]:3 = scf.for %{{.+}} = %[[FHI]] to %[[HI]] step %c1 iter_args(%{{.+}} = %[[FULL]]#0, %{{.+}} = %[[FULL]]#1, %{{.+}} = %[[FULL]]#2)
// CHECK:           attn.mask {{.+}} mask <causal> tile_q 16
// CHECK:         } {attn.loop = "kv_tiles", attn.tiles = "partial"}
// CHECK-NOT:     scf.for
// CHECK:         return %[[PART]]#0, %[[PART]]#1, %[[PART]]#2
func.func @causal(%qt: tensor<?x64xf32>, %k: tensor<?x?x64xf32>, %v: tensor<?x?x64xf32>, %scale: f32,
                  %q0: index, %nq: index, %nkv: index, %nkt: index) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %m, %l, %acc = attn.state_init like %qt : tensor<?x64xf32> -> tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  %r:3 = scf.for %j = %c0 to %nkt step %c1 iter_args(%m0 = %m, %l0 = %l, %a0 = %acc) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>) {
    %k0 = arith.muli %j, %c32 : index
    %kt = attn.load_kv_tile %k[%c0, %k0] : tensor<?x?x64xf32> -> tensor<32x64xf32>
    %vt = attn.load_kv_tile %v[%c0, %k0] : tensor<?x?x64xf32> -> tensor<32x64xf32>
    %s = attn.qk %qt, %kt scale %scale : tensor<?x64xf32>, tensor<32x64xf32>, f32 -> tensor<?x32xf32>
    %sm = attn.mask %s, %q0, %k0, %nq, %nkv mask #attn.mask<causal> tile_q 16 : tensor<?x32xf32>
    %mn = attn.row_max %sm, %m0 : tensor<?x32xf32>, tensor<?xf32>
    %a = attn.rescale_factor %m0, %mn inf_safe : tensor<?xf32>
    %p = attn.exp %sm, %mn inf_safe : tensor<?x32xf32>, tensor<?xf32>
    %l2, %acc2 = attn.accumulate %l0, %a0, %a, %p, %vt : tensor<?xf32>, tensor<?x64xf32>, tensor<?xf32>, tensor<?x32xf32>, tensor<32x64xf32>
    scf.yield %mn, %l2, %acc2 : tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  } {attn.loop = "kv_tiles"}
  return %r#0, %r#1, %r#2 : tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
}

// -----

// A sliding window hides keys on both sides: a partial range before the
// fully visible tiles, the visible tiles, a partial range after them.

// CHECK-LABEL: func.func @window
// CHECK:         %[[LO:[a-z0-9_]+]], %[[FLO:[a-z0-9_]+]], %[[FHI:[a-z0-9_]+]], %[[HI:[a-z0-9_]+]] = attn.classify_tiles {{.+}} mask <sliding_window(100)> tile_q 16 tile_kv 32
// CHECK:         %[[A:.+]]:3 = scf.for %{{.+}} = %[[LO]] to %[[FLO]]
// CHECK:           attn.mask
// CHECK:         } {attn.loop = "kv_tiles", attn.tiles = "partial"}
// CHECK:         %[[B:.+]]:3 = scf.for %{{.+}} = %[[FLO]] to %[[FHI]] {{.+}} iter_args(%{{.+}} = %[[A]]#0,
// CHECK-NOT:       attn.mask
// CHECK:         } {attn.loop = "kv_tiles", attn.tiles = "full"}
// CHECK:         %[[C:.+]]:3 = scf.for %{{.+}} = %[[FHI]] to %[[HI]] {{.+}} iter_args(%{{.+}} = %[[B]]#0,
// CHECK:           attn.mask
// CHECK:         } {attn.loop = "kv_tiles", attn.tiles = "partial"}
// CHECK:         return %[[C]]#0
func.func @window(%qt: tensor<?x64xf32>, %k: tensor<?x?x64xf32>, %v: tensor<?x?x64xf32>, %scale: f32,
                  %q0: index, %nq: index, %nkv: index, %nkt: index) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %m, %l, %acc = attn.state_init like %qt : tensor<?x64xf32> -> tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  %r:3 = scf.for %j = %c0 to %nkt step %c1 iter_args(%m0 = %m, %l0 = %l, %a0 = %acc) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>) {
    %k0 = arith.muli %j, %c32 : index
    %kt = attn.load_kv_tile %k[%c0, %k0] : tensor<?x?x64xf32> -> tensor<32x64xf32>
    %vt = attn.load_kv_tile %v[%c0, %k0] : tensor<?x?x64xf32> -> tensor<32x64xf32>
    %s = attn.qk %qt, %kt scale %scale : tensor<?x64xf32>, tensor<32x64xf32>, f32 -> tensor<?x32xf32>
    %sm = attn.mask %s, %q0, %k0, %nq, %nkv mask #attn.mask<sliding_window(100)> tile_q 16 : tensor<?x32xf32>
    %mn = attn.row_max %sm, %m0 : tensor<?x32xf32>, tensor<?xf32>
    %a = attn.rescale_factor %m0, %mn inf_safe : tensor<?xf32>
    %p = attn.exp %sm, %mn inf_safe : tensor<?x32xf32>, tensor<?xf32>
    %l2, %acc2 = attn.accumulate %l0, %a0, %a, %p, %vt : tensor<?xf32>, tensor<?x64xf32>, tensor<?xf32>, tensor<?x32xf32>, tensor<32x64xf32>
    scf.yield %mn, %l2, %acc2 : tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  } {attn.loop = "kv_tiles"}
  return %r#0, %r#1, %r#2 : tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
}

// -----

// Even without a mask the tail tile past kv_len is partial: full tiles run
// without any masking, the last one keeps the bounds mask.

// CHECK-LABEL: func.func @no_mask
// CHECK:         attn.classify_tiles {{.+}} mask <none>
// CHECK:         scf.for
// CHECK-NOT:       attn.mask
// CHECK:         attn.tiles = "full"
// CHECK:         scf.for
// CHECK:           attn.mask {{.+}} mask <none>
// CHECK:         attn.tiles = "partial"
func.func @no_mask(%qt: tensor<?x64xf32>, %k: tensor<?x?x64xf32>, %v: tensor<?x?x64xf32>, %scale: f32,
                   %q0: index, %nq: index, %nkv: index, %nkt: index) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %m, %l, %acc = attn.state_init like %qt : tensor<?x64xf32> -> tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  %r:3 = scf.for %j = %c0 to %nkt step %c1 iter_args(%m0 = %m, %l0 = %l, %a0 = %acc) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>) {
    %k0 = arith.muli %j, %c32 : index
    %kt = attn.load_kv_tile %k[%c0, %k0] : tensor<?x?x64xf32> -> tensor<32x64xf32>
    %vt = attn.load_kv_tile %v[%c0, %k0] : tensor<?x?x64xf32> -> tensor<32x64xf32>
    %s = attn.qk %qt, %kt scale %scale : tensor<?x64xf32>, tensor<32x64xf32>, f32 -> tensor<?x32xf32>
    %sm = attn.mask %s, %q0, %k0, %nq, %nkv mask #attn.mask<none> tile_q 16 : tensor<?x32xf32>
    %mn = attn.row_max %sm, %m0 : tensor<?x32xf32>, tensor<?xf32>
    %a = attn.rescale_factor %m0, %mn : tensor<?xf32>
    %p = attn.exp %sm, %mn : tensor<?x32xf32>, tensor<?xf32>
    %l2, %acc2 = attn.accumulate %l0, %a0, %a, %p, %vt : tensor<?xf32>, tensor<?x64xf32>, tensor<?xf32>, tensor<?x32xf32>, tensor<32x64xf32>
    scf.yield %mn, %l2, %acc2 : tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  } {attn.loop = "kv_tiles"}
  return %r#0, %r#1, %r#2 : tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
}

// -----

// Loops that are not KV-tile loops, or have no mask, are left alone.

// CHECK-LABEL: func.func @untouched
// CHECK-NOT:     attn.classify_tiles
// CHECK:         scf.for
// CHECK-NOT:     attn.tiles
func.func @untouched(%n: index) -> index {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%x = %c0) -> (index) {
    %y = arith.addi %x, %i : index
    scf.yield %y : index
  } {attn.loop = "kv_tiles"}
  return %r : index
}
