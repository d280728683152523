// RUN: attn-opt %s | attn-opt | FileCheck %s
// RUN: attn-opt %s --mlir-print-op-generic | attn-opt | FileCheck %s

// Every op and attribute prints in a form that parses back to itself.

// CHECK-LABEL: func.func @textbook
// CHECK-SAME:    attn.spec = #attn.spec<mode = prefill, head_dim = 64, dtype = f32, tile_q = 64, tile_kv = 64, mask = sliding_window(32), page_size = 16, gqa = 2, return_lse = true, target = cpu>
// CHECK:         attn.gather_pages %{{.+}}, %{{.+}}, %{{.+}} : tensor<?x16x?x64xf32>, tensor<?xi32> -> tensor<?x?x64xf32>
// CHECK:         attn.standard_attention %{{.+}}, %{{.+}}, %{{.+}} scale %{{.+}} mask <sliding_window(32)> gqa 2 : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
func.func @textbook(%q: tensor<?x?x64xf32>, %kc: tensor<?x16x?x64xf32>, %bt: tensor<?xi32>, %n: index, %s: f32) -> (tensor<?x?x64xf32>, tensor<?x?xf32>)
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 64, mask = sliding_window(32), page_size = 16, gqa = 2, return_lse = true>} {
  %k = attn.gather_pages %kc, %bt, %n : tensor<?x16x?x64xf32>, tensor<?xi32> -> tensor<?x?x64xf32>
  %o, %lse = attn.standard_attention %q, %k, %k scale %s mask #attn.mask<sliding_window(32)> gqa 2 : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
  return %o, %lse : tensor<?x?x64xf32>, tensor<?x?xf32>
}

// CHECK-LABEL: func.func @tiles
// CHECK:         %[[QT:.+]] = attn.load_q_tile %{{.+}}[%{{.+}}, %{{.+}}] tile_q 8 group 2 : tensor<?x?x64xbf16> -> tensor<?x64xbf16>
// CHECK:         %[[M:[a-z0-9_]+]], %[[L:[a-z0-9_]+]], %[[ACC:[a-z0-9_]+]] = attn.state_init like %[[QT]] : tensor<?x64xbf16> -> tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
// CHECK:         %[[SL:.+]] = attn.block_table_lookup %{{.+}}[%{{.+}}], %{{.+}} page_size 16 : tensor<?xi32> -> tensor<32xindex>
// CHECK:         %[[KT:.+]] = attn.load_paged_kv_tile %{{.+}}[%[[SL]], %{{.+}}] : tensor<?x16x?x64xbf16>, tensor<32xindex> -> tensor<32x64xbf16>
// CHECK:         attn.load_kv_tile %{{.+}}[%{{.+}}, %{{.+}}] : tensor<?x?x64xbf16> -> tensor<32x64xbf16>
// CHECK:         %[[S:.+]] = attn.qk %[[QT]], %[[KT]] scale %{{.+}} : tensor<?x64xbf16>, tensor<32x64xbf16>, f32 -> tensor<?x32xf32>
// CHECK:         %[[SM:.+]] = attn.mask %[[S]], %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} mask <causal> tile_q 8 : tensor<?x32xf32>
// CHECK:         %[[MN:.+]] = attn.row_max %[[SM]], %[[M]] : tensor<?x32xf32>, tensor<?xf32>
// CHECK:         %[[A:.+]] = attn.rescale_factor %[[M]], %[[MN]] inf_safe : tensor<?xf32>
// CHECK:         %[[P:.+]] = attn.exp %[[SM]], %[[MN]] : tensor<?x32xf32>, tensor<?xf32>
// CHECK:         %[[LN:[a-z0-9_]+]], %[[AN:[a-z0-9_]+]] = attn.accumulate %[[L]], %[[ACC]], %[[A]], %[[P]], %[[KT]]
// CHECK:         attn.merge %[[M]], %[[L]], %[[ACC]], %[[MN]], %[[LN]], %[[AN]] inf_safe : tensor<?xf32>, tensor<?x64xf32>
// CHECK:         %[[O:.+]] = attn.normalize %[[LN]], %[[AN]] inf_safe : tensor<?xf32>, tensor<?x64xf32>
// CHECK:         attn.lse %[[MN]], %[[LN]] : tensor<?xf32>
// CHECK:         attn.store_o_tile %[[O]] into %{{.+}}[%{{.+}}, %{{.+}}] tile_q 8 group 2 : tensor<?x64xf32> into tensor<?x?x64xbf16>
// CHECK:         attn.classify_tiles %{{.+}}, %{{.+}}, %{{.+}} mask <none> tile_q 8 tile_kv 32
// CHECK:         attn.split_range %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}
func.func @tiles(%q: tensor<?x?x64xbf16>, %k: tensor<?x?x64xbf16>, %kc: tensor<?x16x?x64xbf16>, %bt: tensor<?xi32>,
                 %i: index, %s: f32) -> tensor<?x?x64xbf16> {
  %qt = attn.load_q_tile %q[%i, %i] tile_q 8 group 2 : tensor<?x?x64xbf16> -> tensor<?x64xbf16>
  %m, %l, %acc = attn.state_init like %qt : tensor<?x64xbf16> -> tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  %slots = attn.block_table_lookup %bt[%i], %i page_size 16 : tensor<?xi32> -> tensor<32xindex>
  %kt = attn.load_paged_kv_tile %kc[%slots, %i] : tensor<?x16x?x64xbf16>, tensor<32xindex> -> tensor<32x64xbf16>
  %kt2 = attn.load_kv_tile %k[%i, %i] : tensor<?x?x64xbf16> -> tensor<32x64xbf16>
  %sc = attn.qk %qt, %kt scale %s : tensor<?x64xbf16>, tensor<32x64xbf16>, f32 -> tensor<?x32xf32>
  %sm = attn.mask %sc, %i, %i, %i, %i mask #attn.mask<causal> tile_q 8 : tensor<?x32xf32>
  %mn = attn.row_max %sm, %m : tensor<?x32xf32>, tensor<?xf32>
  %a = attn.rescale_factor %m, %mn inf_safe : tensor<?xf32>
  %p = attn.exp %sm, %mn : tensor<?x32xf32>, tensor<?xf32>
  %l2, %acc2 = attn.accumulate %l, %acc, %a, %p, %kt : tensor<?xf32>, tensor<?x64xf32>, tensor<?xf32>, tensor<?x32xf32>, tensor<32x64xbf16>
  %mm, %lm, %am = attn.merge %m, %l, %acc, %mn, %l2, %acc2 inf_safe : tensor<?xf32>, tensor<?x64xf32>
  %ot = attn.normalize %l2, %acc2 inf_safe : tensor<?xf32>, tensor<?x64xf32>
  %lse = attn.lse %mn, %l2 : tensor<?xf32>
  %o = attn.store_o_tile %ot into %q[%i, %i] tile_q 8 group 2 : tensor<?x64xf32> into tensor<?x?x64xbf16>
  %lo, %flo, %fhi, %hi = attn.classify_tiles %i, %i, %i mask #attn.mask<none> tile_q 8 tile_kv 32
  %slo, %shi = attn.split_range %lo, %hi, %i, %i
  return %o : tensor<?x?x64xbf16>
}
