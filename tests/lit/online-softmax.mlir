// RUN: attn-opt %s --split-input-file --attn-online-softmax | FileCheck %s

// The textbook op becomes heads × query tiles × KV tiles; the KV loop
// carries (m, l, acc) from attn.state_init and rescales by alpha before it
// accumulates. The score matrix only exists one tile at a time.

// CHECK-LABEL: func.func @causal_with_lse
// CHECK-NOT:     attn.standard_attention
// CHECK:         scf.for %[[H:[a-z0-9_]+]] = %c0 to
// CHECK:           scf.for %[[I:[a-z0-9_]+]] = %c0 to
// CHECK:             %[[QS:.+]] = arith.muli %[[I]], %c16
// CHECK:             %[[QT:.+]] = attn.load_q_tile %{{.+}}[%[[H]], %[[QS]]] tile_q 16 group 1
// CHECK:             %[[M0:[a-z0-9_]+]], %[[L0:[a-z0-9_]+]], %[[ACC0:[a-z0-9_]+]] = attn.state_init like %[[QT]]
// CHECK:             %[[R:.+]]:3 = scf.for %[[J:[a-z0-9_]+]] = %c0 to %{{.+}} step %c1 iter_args(%[[M:[a-z0-9_]+]] = %[[M0]], %[[L:[a-z0-9_]+]] = %[[L0]], %[[ACC:[a-z0-9_]+]] = %[[ACC0]])
// CHECK:               %[[KS:.+]] = arith.muli %[[J]], %c32
// CHECK:               %[[KT:.+]] = attn.load_kv_tile %{{.+}}[%[[H]], %[[KS]]] : tensor<?x?x64xf32> -> tensor<32x64xf32>
// CHECK:               %[[VT:.+]] = attn.load_kv_tile %{{.+}}[%[[H]], %[[KS]]]
// CHECK:               %[[S:.+]] = attn.qk %[[QT]], %[[KT]] scale %{{.+}} -> tensor<?x32xf32>
// CHECK:               %[[SM:.+]] = attn.mask %[[S]], %[[QS]], %[[KS]], %{{.+}}, %{{.+}} mask <causal> tile_q 16
// CHECK:               %[[MN:.+]] = attn.row_max %[[SM]], %[[M]]
// CHECK:               %[[A:.+]] = attn.rescale_factor %[[M]], %[[MN]] :
// CHECK:               %[[P:.+]] = attn.exp %[[SM]], %[[MN]] :
// CHECK:               %[[LN:[a-z0-9_]+]], %[[ACCN:[a-z0-9_]+]] = attn.accumulate %[[L]], %[[ACC]], %[[A]], %[[P]], %[[VT]]
// CHECK:               scf.yield %[[MN]], %[[LN]], %[[ACCN]]
// CHECK:             } {attn.loop = "kv_tiles"}
// CHECK:             %[[OT:.+]] = attn.normalize %[[R]]#1, %[[R]]#2 :
// CHECK:             attn.store_o_tile %[[OT]] into %{{.+}}[%[[H]], %[[QS]]] tile_q 16 group 1
// CHECK:             %[[LT:.+]] = attn.lse %[[R]]#0, %[[R]]#1
// CHECK:             attn.store_o_tile %[[LT]] into %{{.+}}[%[[H]], %[[QS]]]
// CHECK:           } {attn.loop = "q_tiles"}
// CHECK:         } {attn.loop = "heads"}
func.func @causal_with_lse(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>, %v: tensor<?x?x64xf32>, %scale: f32) -> (tensor<?x?x64xf32>, tensor<?x?xf32>)
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, tile_q = 16, tile_kv = 32, mask = causal, return_lse = true>} {
  %o, %lse = attn.standard_attention %q, %k, %v scale %scale mask #attn.mask<causal> gqa 1
      : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
  return %o, %lse : tensor<?x?x64xf32>, tensor<?x?xf32>
}

// -----

// With gqa = 4, query head h reads KV head h / 4; without a used lse, no
// lse is computed. The mask is the spec's, windows included.

// CHECK-LABEL: func.func @gqa_window
// CHECK:         scf.for %[[H:[a-z0-9_]+]] = %c0 to
// CHECK:           %[[HK:.+]] = arith.divui %[[H]], %c4
// CHECK:           attn.load_q_tile %{{.+}}[%[[H]],
// CHECK:           attn.load_kv_tile %{{.+}}[%[[HK]],
// CHECK:           attn.load_kv_tile %{{.+}}[%[[HK]],
// CHECK:           attn.mask {{.+}} mask <sliding_window(8)> tile_q 4
// CHECK-NOT:     attn.lse
// CHECK:         return
func.func @gqa_window(%q: tensor<?x?x32xf64>, %k: tensor<?x?x32xf64>, %v: tensor<?x?x32xf64>, %scale: f64) -> tensor<?x?x32xf64>
    attributes {attn.spec = #attn.spec<target = cpu, dtype = f64, head_dim = 32, tile_q = 4, tile_kv = 8, mask = sliding_window(8), gqa = 4>} {
  %o, %lse = attn.standard_attention %q, %k, %v scale %scale mask #attn.mask<sliding_window(8)> gqa 4
      : tensor<?x?x32xf64>, tensor<?x?x32xf64>, tensor<?x?x32xf64>, f64 -> tensor<?x?x32xf64>, tensor<?x?xf64>
  return %o : tensor<?x?x32xf64>
}

// -----

// A gathered paged cache: the KV length comes from the gather, not from
// the size of a tensor, so that attn-page-kv can remove the gather later.

// CHECK-LABEL: func.func @paged
// CHECK-SAME:    %[[LEN:[a-z0-9_]+]]: index
// CHECK:         %[[K:.+]] = attn.gather_pages
// CHECK-NOT:     tensor.dim %[[K]]
// CHECK:         %[[NKT:.+]] = arith.ceildivui %[[LEN]], %c16
// CHECK:         scf.for %{{.+}} = %c0 to %[[NKT]]
// CHECK:           attn.load_kv_tile %[[K]]
func.func @paged(%q: tensor<?x?x64xf32>, %kc: tensor<?x16x?x64xf32>, %vc: tensor<?x16x?x64xf32>, %bt: tensor<?xi32>, %len: index, %scale: f32) -> tensor<?x?x64xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, tile_kv = 16, page_size = 16>} {
  %k = attn.gather_pages %kc, %bt, %len : tensor<?x16x?x64xf32>, tensor<?xi32> -> tensor<?x?x64xf32>
  %v = attn.gather_pages %vc, %bt, %len : tensor<?x16x?x64xf32>, tensor<?xi32> -> tensor<?x?x64xf32>
  %o, %lse = attn.standard_attention %q, %k, %v scale %scale mask #attn.mask<none> gqa 1
      : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
  return %o : tensor<?x?x64xf32>
}
