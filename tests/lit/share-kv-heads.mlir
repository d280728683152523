// RUN: attn-opt %s --split-input-file --attn-share-kv-heads | FileCheck %s

// gqa = 4: the heads loop runs over KV heads; each query tile packs the 4
// query heads of the group (group 4), so each K and V tile is loaded once
// for all of them.

// CHECK-LABEL: func.func @gqa4
// CHECK:         %[[HQ:.+]] = tensor.dim %{{.+}}, %c0
// CHECK:         %[[HKV:.+]] = arith.divui %[[HQ]], %c4
// CHECK:         scf.for %[[KVH:[a-z0-9_]+]] = %c0 to %[[HKV]] step %c1
// CHECK-NEXT:      %[[QH:.+]] = arith.muli %[[KVH]], %c4
// CHECK-NOT:       arith.divui
// CHECK:           attn.load_q_tile %{{.+}}[%[[QH]], %c0] tile_q 8 group 4
// CHECK:           attn.load_kv_tile %{{.+}}[%[[KVH]], %c0]
// CHECK:           attn.load_kv_tile %{{.+}}[%[[KVH]], %c0]
// CHECK:           attn.store_o_tile %{{.+}} into %{{.+}}[%[[QH]], %c0] tile_q 8 group 4
// CHECK:         } {attn.gqa = 4 : i64, attn.loop = "heads"}
func.func @gqa4(%q: tensor<?x?x32xf32>, %k: tensor<?x?x32xf32>, %v: tensor<?x?x32xf32>, %scale: f32) -> tensor<?x?x32xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 32, tile_q = 8, tile_kv = 8, gqa = 4>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %hq = tensor.dim %q, %c0 : tensor<?x?x32xf32>
  %nq = tensor.dim %q, %c1 : tensor<?x?x32xf32>
  %o0 = tensor.empty(%hq, %nq) : tensor<?x?x32xf32>
  %r = scf.for %h = %c0 to %hq step %c1 iter_args(%o = %o0) -> (tensor<?x?x32xf32>) {
    %hk = arith.divui %h, %c4 : index
    %qt = attn.load_q_tile %q[%h, %c0] tile_q 8 group 1 : tensor<?x?x32xf32> -> tensor<?x32xf32>
    %m, %l, %acc = attn.state_init like %qt : tensor<?x32xf32> -> tensor<?xf32>, tensor<?xf32>, tensor<?x32xf32>
    %kt = attn.load_kv_tile %k[%hk, %c0] : tensor<?x?x32xf32> -> tensor<8x32xf32>
    %vt = attn.load_kv_tile %v[%hk, %c0] : tensor<?x?x32xf32> -> tensor<8x32xf32>
    %s = attn.qk %qt, %kt scale %scale : tensor<?x32xf32>, tensor<8x32xf32>, f32 -> tensor<?x8xf32>
    %mn = attn.row_max %s, %m : tensor<?x8xf32>, tensor<?xf32>
    %a = attn.rescale_factor %m, %mn : tensor<?xf32>
    %p = attn.exp %s, %mn : tensor<?x8xf32>, tensor<?xf32>
    %l2, %acc2 = attn.accumulate %l, %acc, %a, %p, %vt : tensor<?xf32>, tensor<?x32xf32>, tensor<?xf32>, tensor<?x8xf32>, tensor<8x32xf32>
    %ot = attn.normalize %l2, %acc2 : tensor<?xf32>, tensor<?x32xf32>
    %o2 = attn.store_o_tile %ot into %o[%h, %c0] tile_q 8 group 1 : tensor<?x32xf32> into tensor<?x?x32xf32>
    scf.yield %o2 : tensor<?x?x32xf32>
  } {attn.loop = "heads"}
  return %r : tensor<?x?x32xf32>
}

// -----

// gqa = 1: every query head has its own KV head; nothing to share.

// CHECK-LABEL: func.func @mha
// CHECK:         scf.for %[[H:[a-z0-9_]+]] = %c0 to %{{.+}} step %c1
// CHECK:           attn.load_q_tile %{{.+}}[%[[H]], %c0] tile_q 8 group 1
// CHECK-NOT:     attn.gqa
func.func @mha(%q: tensor<?x?x32xf32>, %k: tensor<?x?x32xf32>, %scale: f32) -> tensor<?x?x32xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 32, tile_q = 8, tile_kv = 8>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %hq = tensor.dim %q, %c0 : tensor<?x?x32xf32>
  %r = scf.for %h = %c0 to %hq step %c1 iter_args(%o = %q) -> (tensor<?x?x32xf32>) {
    %qt = attn.load_q_tile %q[%h, %c0] tile_q 8 group 1 : tensor<?x?x32xf32> -> tensor<?x32xf32>
    %o2 = attn.store_o_tile %qt into %o[%h, %c0] tile_q 8 group 1 : tensor<?x32xf32> into tensor<?x?x32xf32>
    scf.yield %o2 : tensor<?x?x32xf32>
  } {attn.loop = "heads"}
  return %r : tensor<?x?x32xf32>
}
