// RUN: attn-opt %s --split-input-file --attn-lower-tiles --verify-diagnostics | FileCheck %s

// The recurrence's arithmetic becomes linalg.generic over tensors; the
// -inf guards appear exactly where attn-safe-init asked for them.

// CHECK-LABEL: func.func @step
// CHECK-NOT:     attn.
// CHECK:         linalg.fill
// rescale_factor (inf_safe): exp(m_old - m_new), 1.0 where m_new is -inf
// CHECK:         linalg.generic
// CHECK:           math.exp
// CHECK:           arith.cmpf oeq, %{{.+}}, %cst
// CHECK:           arith.select
// exp (not inf_safe): the plain formula, no guard
// CHECK:         linalg.generic
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      arith.subf
// CHECK-NEXT:      math.exp
// CHECK-NEXT:      linalg.yield
func.func @step(%q: tensor<?x32xf64>, %s: tensor<?x8xf64>, %mn: tensor<?xf64>) -> (tensor<?xf64>, tensor<?x8xf64>) {
  %m, %l, %acc = attn.state_init like %q : tensor<?x32xf64> -> tensor<?xf64>, tensor<?xf64>, tensor<?x32xf64>
  %a = attn.rescale_factor %m, %mn inf_safe : tensor<?xf64>
  %p = attn.exp %s, %mn : tensor<?x8xf64>, tensor<?xf64>
  return %a, %p : tensor<?xf64>, tensor<?x8xf64>
}

// -----

// The block table is read only for tokens that exist; past kv_len the slot is -1.

// CHECK-LABEL: func.func @lookup
// CHECK:         linalg.generic
// CHECK:           arith.cmpi slt
// CHECK:           scf.if
// CHECK:             tensor.extract %{{.+}}[%{{.+}}] : tensor<?xi32>
// CHECK:           } else {
// CHECK:             %[[NONE:.+]] = arith.constant -1 : index
func.func @lookup(%bt: tensor<?xi32>, %k0: index, %n: index) -> tensor<16xindex> {
  %s = attn.block_table_lookup %bt[%k0], %n page_size 16 : tensor<?xi32> -> tensor<16xindex>
  return %s : tensor<16xindex>
}

// -----

func.func @textbook(%q: tensor<?x?x32xf64>, %s: f64) -> tensor<?x?x32xf64> {
  // expected-error@+1 {{attn-lower-tiles: 'attn.standard_attention' is textbook-level; run the attn pipeline first}}
  %o, %l = attn.standard_attention %q, %q, %q scale %s mask #attn.mask<none> gqa 1 : tensor<?x?x32xf64>, tensor<?x?x32xf64>, tensor<?x?x32xf64>, f64 -> tensor<?x?x32xf64>, tensor<?x?xf64>
  return %o : tensor<?x?x32xf64>
}
