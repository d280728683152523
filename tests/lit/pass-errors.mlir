// RUN: attn-opt %s --split-input-file --verify-diagnostics --attn-online-softmax --attn-share-kv-heads --attn-split-kv

// What the passes say when the IR does not have the shape they need.

func.func @no_spec(%q: tensor<?x?x64xf32>, %s: f32) -> tensor<?x?x64xf32> {
  // expected-error@+1 {{attn-online-softmax needs the tile sizes of an `attn.spec` attribute on the enclosing function}}
  %o, %l = attn.standard_attention %q, %q, %q scale %s mask #attn.mask<none> gqa 1 : tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32 -> tensor<?x?x64xf32>, tensor<?x?xf32>
  return %o : tensor<?x?x64xf32>
}

// -----

func.func @heads_without_map(%q: tensor<?x?x32xf32>, %n: index) -> tensor<?x?x32xf32>
    attributes {attn.spec = #attn.spec<target = cpu, head_dim = 32, gqa = 2, tile_q = 8>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-error@+1 {{attn-share-kv-heads: this heads loop does not map query head h to KV head h / 2}}
  %r = scf.for %h = %c0 to %n step %c1 iter_args(%o = %q) -> (tensor<?x?x32xf32>) {
    %qt = attn.load_q_tile %q[%h, %c0] tile_q 8 group 1 : tensor<?x?x32xf32> -> tensor<?x32xf32>
    %o2 = attn.store_o_tile %qt into %o[%h, %c0] tile_q 8 group 1 : tensor<?x32xf32> into tensor<?x?x32xf32>
    scf.yield %o2 : tensor<?x?x32xf32>
  } {attn.loop = "heads"}
  return %r : tensor<?x?x32xf32>
}

// -----

// expected-error@+1 {{attn-split-kv: split_kv = auto needs a trailing `num_splits: index` argument}}
func.func @auto_without_num_splits(%x: f32) attributes {attn.spec = #attn.spec<mode = decode, target = cpu, page_size = 16>} {
  return
}
