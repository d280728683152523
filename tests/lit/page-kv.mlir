// RUN: attn-opt %s --split-input-file --attn-page-kv | FileCheck %s

// Each KV tile is read through the block table in place; one lookup per
// tile serves the K and the V loads; the gathered copies disappear.

// CHECK-LABEL: func.func @paged
// CHECK-SAME:    %[[KC:[a-z0-9_]+]]: tensor<?x19x?x32xf64>, %[[VC:[a-z0-9_]+]]: tensor<?x19x?x32xf64>, %[[BT:[a-z0-9_]+]]: tensor<?xi32>, %[[LEN:[a-z0-9_]+]]: index
// CHECK-NOT:     attn.gather_pages
// CHECK:         scf.for %[[J:[a-z0-9_]+]] =
// CHECK:           %[[KS:.+]] = arith.muli %[[J]], %c8
// CHECK-NEXT:      %[[SLOTS:.+]] = attn.block_table_lookup %[[BT]][%[[KS]]], %[[LEN]] page_size 19 : tensor<?xi32> -> tensor<8xindex>
// CHECK-NOT:       attn.block_table_lookup
// CHECK:           attn.load_paged_kv_tile %[[KC]][%[[SLOTS]], %[[H:.+]]] : tensor<?x19x?x32xf64>, tensor<8xindex> -> tensor<8x32xf64>
// CHECK-NOT:       attn.block_table_lookup
// CHECK:           attn.load_paged_kv_tile %[[VC]][%[[SLOTS]], %[[H]]]
// CHECK-NOT:     attn.load_kv_tile
// CHECK-NOT:     attn.gather_pages
func.func @paged(%kc: tensor<?x19x?x32xf64>, %vc: tensor<?x19x?x32xf64>, %bt: tensor<?xi32>, %len: index,
                 %h: index, %n: index) -> tensor<8x32xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %z = arith.constant dense<0.0> : tensor<8x32xf64>
  %k = attn.gather_pages %kc, %bt, %len : tensor<?x19x?x32xf64>, tensor<?xi32> -> tensor<?x?x32xf64>
  %v = attn.gather_pages %vc, %bt, %len : tensor<?x19x?x32xf64>, tensor<?xi32> -> tensor<?x?x32xf64>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (tensor<8x32xf64>) {
    %k0 = arith.muli %j, %c8 : index
    %kt = attn.load_kv_tile %k[%h, %k0] : tensor<?x?x32xf64> -> tensor<8x32xf64>
    %vt = attn.load_kv_tile %v[%h, %k0] : tensor<?x?x32xf64> -> tensor<8x32xf64>
    %s = arith.addf %kt, %vt : tensor<8x32xf64>
    %a = arith.addf %acc, %s : tensor<8x32xf64>
    scf.yield %a : tensor<8x32xf64>
  }
  return %r : tensor<8x32xf64>
}

// -----

// A contiguous cache is read directly: nothing to page.

// CHECK-LABEL: func.func @contiguous
// CHECK:         attn.load_kv_tile
// CHECK-NOT:     attn.block_table_lookup
func.func @contiguous(%k: tensor<?x?x32xf64>, %h: index, %k0: index) -> tensor<8x32xf64> {
  %kt = attn.load_kv_tile %k[%h, %k0] : tensor<?x?x32xf64> -> tensor<8x32xf64>
  return %kt : tensor<8x32xf64>
}
