// RUN: attn-opt %s --split-input-file --attn-split-kv | FileCheck %s

// Decode with 3 splits: the chain of KV-tile loops runs once per split on
// the split's part of [lo, hi), from a fresh state, and attn.merge folds
// each partial state into the running one with the rescale rule.

// CHECK-LABEL: func.func @three_splits
// CHECK-SAME:    %[[LO:[a-z0-9_]+]]: index, %[[MID:[a-z0-9_]+]]: index, %[[HI:[a-z0-9_]+]]: index)
// CHECK-DAG:     %[[NS:.+]] = arith.constant 3 : index
// CHECK:         %[[IM:[a-z0-9_]+]], %[[IL:[a-z0-9_]+]], %[[IA:[a-z0-9_]+]] = attn.state_init
// CHECK:         %[[R:.+]]:3 = scf.for %[[SP:[a-z0-9_]+]] = %{{.+}} to %[[NS]] step %{{.+}} iter_args(%[[RM:[a-z0-9_]+]] = %[[IM]], %[[RL:[a-z0-9_]+]] = %[[IL]], %[[RA:[a-z0-9_]+]] = %[[IA]])
// CHECK:           %[[SLO:[a-z0-9_]+]], %[[SHI:[a-z0-9_]+]] = attn.split_range %[[LO]], %[[HI]], %[[SP]], %[[NS]]
// CHECK:           %[[FM:[a-z0-9_]+]], %[[FL:[a-z0-9_]+]], %[[FA:[a-z0-9_]+]] = attn.state_init
// CHECK:           %[[LB1:.+]] = arith.maxui %[[LO]], %[[SLO]]
// CHECK:           %[[UB1:.+]] = arith.minui %[[MID]], %[[SHI]]
// CHECK:           %[[UB1C:.+]] = arith.maxui %[[LB1]], %[[UB1]]
// CHECK:           %[[P1:.+]]:3 = scf.for %{{.+}} = %[[LB1]] to %[[UB1C]] {{.+}} iter_args(%{{.+}} = %[[FM]], %{{.+}} = %[[FL]], %{{.+}} = %[[FA]])
// CHECK:           attn.tiles = "full"
// CHECK:           %[[LB2:.+]] = arith.maxui %[[MID]], %[[SLO]]
// CHECK:           %[[UB2:.+]] = arith.minui %[[HI]], %[[SHI]]
// CHECK:           %[[UB2C:.+]] = arith.maxui %[[LB2]], %[[UB2]]
// CHECK:           %[[P2:.+]]:3 = scf.for %{{.+}} = %[[LB2]] to %[[UB2C]] {{.+}} iter_args(%{{.+}} = %[[P1]]#0, %{{.+}} = %[[P1]]#1, %{{.+}} = %[[P1]]#2)
// CHECK:           attn.mask
// CHECK:           attn.tiles = "partial"
// CHECK:           %[[MM:[a-z0-9_]+]], %[[ML:[a-z0-9_]+]], %[[MA:[a-z0-9_]+]] = attn.merge %[[RM]], %[[RL]], %[[RA]], %[[P2]]#0, %[[P2]]#1, %[[P2]]#2 inf_safe
// CHECK:           scf.yield %[[MM]], %[[ML]], %[[MA]]
// CHECK:         } {attn.loop = "kv_splits"}
// CHECK:         attn.normalize %[[R]]#1, %[[R]]#2
func.func @three_splits(%qt: tensor<?x64xf32>, %k: tensor<?x?x64xf32>, %v: tensor<?x?x64xf32>, %scale: f32,
    %q0: index, %nq: index, %nkv: index, %lo: index, %mid: index, %hi: index) -> tensor<?x64xf32>
    attributes {attn.spec = #attn.spec<mode = decode, target = cpu, head_dim = 64, tile_kv = 16, page_size = 16, split_kv = 3, mask = causal>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %init:3 = attn.state_init like %qt : tensor<?x64xf32> -> tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  %full:3 = scf.for %j = %lo to %mid step %c1 iter_args(%m0 = %init#0, %l0 = %init#1, %a0 = %init#2) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>) {
    %k0 = arith.muli %j, %c16 : index
    %kt = attn.load_kv_tile %k[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %vt = attn.load_kv_tile %v[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %s = attn.qk %qt, %kt scale %scale : tensor<?x64xf32>, tensor<16x64xf32>, f32 -> tensor<?x16xf32>
    %sm = arith.addf %s, %s : tensor<?x16xf32>
    %mn = attn.row_max %sm, %m0 : tensor<?x16xf32>, tensor<?xf32>
    %a = attn.rescale_factor %m0, %mn inf_safe : tensor<?xf32>
    %p = attn.exp %sm, %mn inf_safe : tensor<?x16xf32>, tensor<?xf32>
    %l2, %acc2 = attn.accumulate %l0, %a0, %a, %p, %vt : tensor<?xf32>, tensor<?x64xf32>, tensor<?xf32>, tensor<?x16xf32>, tensor<16x64xf32>
    scf.yield %mn, %l2, %acc2 : tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  } {attn.loop = "kv_tiles", attn.tiles = "full"}
  %part:3 = scf.for %j = %mid to %hi step %c1 iter_args(%m0 = %full#0, %l0 = %full#1, %a0 = %full#2) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>) {
    %k0 = arith.muli %j, %c16 : index
    %kt = attn.load_kv_tile %k[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %vt = attn.load_kv_tile %v[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %s = attn.qk %qt, %kt scale %scale : tensor<?x64xf32>, tensor<16x64xf32>, f32 -> tensor<?x16xf32>
    %sm = attn.mask %s, %q0, %k0, %nq, %nkv mask #attn.mask<causal> tile_q 1 : tensor<?x16xf32>
    %mn = attn.row_max %sm, %m0 : tensor<?x16xf32>, tensor<?xf32>
    %a = attn.rescale_factor %m0, %mn inf_safe : tensor<?xf32>
    %p = attn.exp %sm, %mn inf_safe : tensor<?x16xf32>, tensor<?xf32>
    %l2, %acc2 = attn.accumulate %l0, %a0, %a, %p, %vt : tensor<?xf32>, tensor<?x64xf32>, tensor<?xf32>, tensor<?x16xf32>, tensor<16x64xf32>
    scf.yield %mn, %l2, %acc2 : tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  } {attn.loop = "kv_tiles", attn.tiles = "partial"}
  %o = attn.normalize %part#1, %part#2 inf_safe : tensor<?xf32>, tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}

// -----

// split_kv = auto: the number of splits is the trailing `num_splits` argument.

// CHECK-LABEL: func.func @auto_splits
// CHECK-SAME:    %[[NS:[a-z0-9_]+]]: index)
// CHECK:         scf.for %[[SP:[a-z0-9_]+]] = %{{.+}} to %[[NS]]
// CHECK:           attn.split_range %{{.+}}, %{{.+}}, %[[SP]], %[[NS]]
// CHECK:           attn.merge
// CHECK:         } {attn.loop = "kv_splits"}
func.func @auto_splits(%qt: tensor<?x64xf32>, %k: tensor<?x?x64xf32>, %v: tensor<?x?x64xf32>, %scale: f32,
    %q0: index, %nq: index, %nkv: index, %lo: index, %mid: index, %hi: index, %num_splits: index) -> tensor<?x64xf32>
    attributes {attn.spec = #attn.spec<mode = decode, target = cpu, head_dim = 64, tile_kv = 16, page_size = 16, mask = causal>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %init:3 = attn.state_init like %qt : tensor<?x64xf32> -> tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  %full:3 = scf.for %j = %lo to %mid step %c1 iter_args(%m0 = %init#0, %l0 = %init#1, %a0 = %init#2) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>) {
    %k0 = arith.muli %j, %c16 : index
    %kt = attn.load_kv_tile %k[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %vt = attn.load_kv_tile %v[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %s = attn.qk %qt, %kt scale %scale : tensor<?x64xf32>, tensor<16x64xf32>, f32 -> tensor<?x16xf32>
    %sm = arith.addf %s, %s : tensor<?x16xf32>
    %mn = attn.row_max %sm, %m0 : tensor<?x16xf32>, tensor<?xf32>
    %a = attn.rescale_factor %m0, %mn inf_safe : tensor<?xf32>
    %p = attn.exp %sm, %mn inf_safe : tensor<?x16xf32>, tensor<?xf32>
    %l2, %acc2 = attn.accumulate %l0, %a0, %a, %p, %vt : tensor<?xf32>, tensor<?x64xf32>, tensor<?xf32>, tensor<?x16xf32>, tensor<16x64xf32>
    scf.yield %mn, %l2, %acc2 : tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  } {attn.loop = "kv_tiles", attn.tiles = "full"}
  %part:3 = scf.for %j = %mid to %hi step %c1 iter_args(%m0 = %full#0, %l0 = %full#1, %a0 = %full#2) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>) {
    %k0 = arith.muli %j, %c16 : index
    %kt = attn.load_kv_tile %k[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %vt = attn.load_kv_tile %v[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %s = attn.qk %qt, %kt scale %scale : tensor<?x64xf32>, tensor<16x64xf32>, f32 -> tensor<?x16xf32>
    %sm = attn.mask %s, %q0, %k0, %nq, %nkv mask #attn.mask<causal> tile_q 1 : tensor<?x16xf32>
    %mn = attn.row_max %sm, %m0 : tensor<?x16xf32>, tensor<?xf32>
    %a = attn.rescale_factor %m0, %mn inf_safe : tensor<?xf32>
    %p = attn.exp %sm, %mn inf_safe : tensor<?x16xf32>, tensor<?xf32>
    %l2, %acc2 = attn.accumulate %l0, %a0, %a, %p, %vt : tensor<?xf32>, tensor<?x64xf32>, tensor<?xf32>, tensor<?x16xf32>, tensor<16x64xf32>
    scf.yield %mn, %l2, %acc2 : tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  } {attn.loop = "kv_tiles", attn.tiles = "partial"}
  %o = attn.normalize %part#1, %part#2 inf_safe : tensor<?xf32>, tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}

// -----

// One split, or prefill: nothing to split.

// CHECK-LABEL: func.func @one_split
// CHECK-NOT:     kv_splits
// CHECK-NOT:     attn.merge
// CHECK:         return
func.func @one_split(%qt: tensor<?x64xf32>, %k: tensor<?x?x64xf32>, %v: tensor<?x?x64xf32>, %scale: f32,
    %q0: index, %nq: index, %nkv: index, %lo: index, %mid: index, %hi: index) -> tensor<?x64xf32>
    attributes {attn.spec = #attn.spec<mode = decode, target = cpu, head_dim = 64, tile_kv = 16, page_size = 16, split_kv = 1, mask = causal>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %init:3 = attn.state_init like %qt : tensor<?x64xf32> -> tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  %full:3 = scf.for %j = %lo to %mid step %c1 iter_args(%m0 = %init#0, %l0 = %init#1, %a0 = %init#2) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>) {
    %k0 = arith.muli %j, %c16 : index
    %kt = attn.load_kv_tile %k[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %vt = attn.load_kv_tile %v[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %s = attn.qk %qt, %kt scale %scale : tensor<?x64xf32>, tensor<16x64xf32>, f32 -> tensor<?x16xf32>
    %sm = arith.addf %s, %s : tensor<?x16xf32>
    %mn = attn.row_max %sm, %m0 : tensor<?x16xf32>, tensor<?xf32>
    %a = attn.rescale_factor %m0, %mn inf_safe : tensor<?xf32>
    %p = attn.exp %sm, %mn inf_safe : tensor<?x16xf32>, tensor<?xf32>
    %l2, %acc2 = attn.accumulate %l0, %a0, %a, %p, %vt : tensor<?xf32>, tensor<?x64xf32>, tensor<?xf32>, tensor<?x16xf32>, tensor<16x64xf32>
    scf.yield %mn, %l2, %acc2 : tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  } {attn.loop = "kv_tiles", attn.tiles = "full"}
  %part:3 = scf.for %j = %mid to %hi step %c1 iter_args(%m0 = %full#0, %l0 = %full#1, %a0 = %full#2) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>) {
    %k0 = arith.muli %j, %c16 : index
    %kt = attn.load_kv_tile %k[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %vt = attn.load_kv_tile %v[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %s = attn.qk %qt, %kt scale %scale : tensor<?x64xf32>, tensor<16x64xf32>, f32 -> tensor<?x16xf32>
    %sm = attn.mask %s, %q0, %k0, %nq, %nkv mask #attn.mask<causal> tile_q 1 : tensor<?x16xf32>
    %mn = attn.row_max %sm, %m0 : tensor<?x16xf32>, tensor<?xf32>
    %a = attn.rescale_factor %m0, %mn inf_safe : tensor<?xf32>
    %p = attn.exp %sm, %mn inf_safe : tensor<?x16xf32>, tensor<?xf32>
    %l2, %acc2 = attn.accumulate %l0, %a0, %a, %p, %vt : tensor<?xf32>, tensor<?x64xf32>, tensor<?xf32>, tensor<?x16xf32>, tensor<16x64xf32>
    scf.yield %mn, %l2, %acc2 : tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  } {attn.loop = "kv_tiles", attn.tiles = "partial"}
  %o = attn.normalize %part#1, %part#2 inf_safe : tensor<?xf32>, tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}

// -----

// CHECK-LABEL: func.func @prefill
// CHECK-NOT:     kv_splits
// CHECK-NOT:     attn.merge
// CHECK:         return
func.func @prefill(%qt: tensor<?x64xf32>, %k: tensor<?x?x64xf32>, %v: tensor<?x?x64xf32>, %scale: f32,
    %q0: index, %nq: index, %nkv: index, %lo: index, %mid: index, %hi: index) -> tensor<?x64xf32>
    attributes {attn.spec = #attn.spec<mode = prefill, target = cpu, head_dim = 64, tile_q = 1, tile_kv = 16, mask = causal>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %init:3 = attn.state_init like %qt : tensor<?x64xf32> -> tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  %full:3 = scf.for %j = %lo to %mid step %c1 iter_args(%m0 = %init#0, %l0 = %init#1, %a0 = %init#2) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>) {
    %k0 = arith.muli %j, %c16 : index
    %kt = attn.load_kv_tile %k[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %vt = attn.load_kv_tile %v[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %s = attn.qk %qt, %kt scale %scale : tensor<?x64xf32>, tensor<16x64xf32>, f32 -> tensor<?x16xf32>
    %sm = arith.addf %s, %s : tensor<?x16xf32>
    %mn = attn.row_max %sm, %m0 : tensor<?x16xf32>, tensor<?xf32>
    %a = attn.rescale_factor %m0, %mn inf_safe : tensor<?xf32>
    %p = attn.exp %sm, %mn inf_safe : tensor<?x16xf32>, tensor<?xf32>
    %l2, %acc2 = attn.accumulate %l0, %a0, %a, %p, %vt : tensor<?xf32>, tensor<?x64xf32>, tensor<?xf32>, tensor<?x16xf32>, tensor<16x64xf32>
    scf.yield %mn, %l2, %acc2 : tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  } {attn.loop = "kv_tiles", attn.tiles = "full"}
  %part:3 = scf.for %j = %mid to %hi step %c1 iter_args(%m0 = %full#0, %l0 = %full#1, %a0 = %full#2) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>) {
    %k0 = arith.muli %j, %c16 : index
    %kt = attn.load_kv_tile %k[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %vt = attn.load_kv_tile %v[%c0, %k0] : tensor<?x?x64xf32> -> tensor<16x64xf32>
    %s = attn.qk %qt, %kt scale %scale : tensor<?x64xf32>, tensor<16x64xf32>, f32 -> tensor<?x16xf32>
    %sm = attn.mask %s, %q0, %k0, %nq, %nkv mask #attn.mask<causal> tile_q 1 : tensor<?x16xf32>
    %mn = attn.row_max %sm, %m0 : tensor<?x16xf32>, tensor<?xf32>
    %a = attn.rescale_factor %m0, %mn inf_safe : tensor<?xf32>
    %p = attn.exp %sm, %mn inf_safe : tensor<?x16xf32>, tensor<?xf32>
    %l2, %acc2 = attn.accumulate %l0, %a0, %a, %p, %vt : tensor<?xf32>, tensor<?x64xf32>, tensor<?xf32>, tensor<?x16xf32>, tensor<16x64xf32>
    scf.yield %mn, %l2, %acc2 : tensor<?xf32>, tensor<?xf32>, tensor<?x64xf32>
  } {attn.loop = "kv_tiles", attn.tiles = "partial"}
  %o = attn.normalize %part#1, %part#2 inf_safe : tensor<?xf32>, tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}
