// RUN: attn-opt %s --split-input-file --attn-safe-init | FileCheck %s

// Every op that could compute exp(-inf - -inf) or 0 / 0 becomes inf_safe.

// CHECK-LABEL: func.func @recurrence_step
// CHECK:         attn.row_max
// CHECK-NEXT:    attn.rescale_factor %{{.+}}, %{{.+}} inf_safe : tensor<?xf32>
// CHECK-NEXT:    attn.exp %{{.+}}, %{{.+}} inf_safe : tensor<?x8xf32>, tensor<?xf32>
// CHECK-NEXT:    attn.accumulate
// CHECK-NEXT:    attn.normalize %{{.+}}, %{{.+}} inf_safe : tensor<?xf32>, tensor<?x32xf32>
// CHECK-NEXT:    attn.lse
func.func @recurrence_step(%s: tensor<?x8xf32>, %m: tensor<?xf32>, %l: tensor<?xf32>, %acc: tensor<?x32xf32>, %v: tensor<8x32xf32>) -> (tensor<?x32xf32>, tensor<?xf32>) {
  %mn = attn.row_max %s, %m : tensor<?x8xf32>, tensor<?xf32>
  %a = attn.rescale_factor %m, %mn : tensor<?xf32>
  %p = attn.exp %s, %mn : tensor<?x8xf32>, tensor<?xf32>
  %l2, %acc2 = attn.accumulate %l, %acc, %a, %p, %v : tensor<?xf32>, tensor<?x32xf32>, tensor<?xf32>, tensor<?x8xf32>, tensor<8x32xf32>
  %o = attn.normalize %l2, %acc2 : tensor<?xf32>, tensor<?x32xf32>
  %lse = attn.lse %mn, %l2 : tensor<?xf32>
  return %o, %lse : tensor<?x32xf32>, tensor<?xf32>
}

// -----

// The merge of split-KV partial states is guarded too; ops already guarded
// stay as they are.

// CHECK-LABEL: func.func @merge_and_already_safe
// CHECK:         attn.merge {{.+}} inf_safe : tensor<?xf64>, tensor<?x32xf64>
// CHECK:         attn.normalize %{{.+}}, %{{.+}} inf_safe :
// CHECK-NOT:     inf_safe inf_safe
func.func @merge_and_already_safe(%ma: tensor<?xf64>, %la: tensor<?xf64>, %acca: tensor<?x32xf64>,
                                  %mb: tensor<?xf64>, %lb: tensor<?xf64>, %accb: tensor<?x32xf64>) -> tensor<?x32xf64> {
  %m, %l, %acc = attn.merge %ma, %la, %acca, %mb, %lb, %accb : tensor<?xf64>, tensor<?x32xf64>
  %o = attn.normalize %l, %acc inf_safe : tensor<?xf64>, tensor<?x32xf64>
  return %o : tensor<?x32xf64>
}
