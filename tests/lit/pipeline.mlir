// RUN: attn-opt %s --attn-pipeline | FileCheck %s
// RUN: attn-opt %s --attn-pipeline=stop-after=attn-safe-init | FileCheck %s --check-prefix=SAFE
// RUN: not attn-opt %s --attn-pipeline=stop-after=attn-bogus 2>&1 | FileCheck %s --check-prefix=BADSTOP
// RUN: not attn-opt %s --attn-pipeline=stop-after= 2>&1 | FileCheck %s --check-prefix=EMPTYSTOP
// RUN: not attn-opt %s --attn-pipeline=foo=1 2>&1 | FileCheck %s --check-prefix=BADOPT
// A later pass alone on the textbook IR says what must run first.
// RUN: not attn-opt %s --attn-mask-tiles 2>&1 | FileCheck %s --check-prefix=UNTILED
// UNTILED: error: attn-mask-tiles runs after attn-online-softmax, on its tiled recurrence; this textbook op has none yet

// stop-after ends the pipeline after the pass it names: the online softmax
// and the -inf-safe rescale are in, the mask tiles and the pages are not yet.
// SAFE-LABEL: func.func @decode
// SAFE:         attn.gather_pages
// SAFE:         attn.rescale_factor {{.+}} inf_safe
// SAFE-NOT:     attn.classify_tiles
// SAFE-NOT:     attn.block_table_lookup

// A name that is no pass of the pipeline, or an option it does not have, is
// refused and named.
// BADSTOP: error: attn-pipeline: stop-after=attn-bogus is not a pass of the pipeline (attn-online-softmax, attn-safe-init, attn-mask-tiles, attn-share-kv-heads, attn-page-kv, attn-split-kv)
// EMPTYSTOP: error: attn-pipeline: stop-after=(nothing) is not a pass of the pipeline (attn-online-softmax,
// BADSTOP-NOT: see current operation
// BADOPT: no such option foo

// The named pipeline takes a textbook decode kernel to the final tile-level
// form: every idea is in place.

// CHECK-LABEL: func.func @decode
// CHECK-NOT:     attn.standard_attention
// CHECK-NOT:     attn.gather_pages
// CHECK:         scf.for {{.+}} {
// CHECK:           attn.load_q_tile {{.+}} tile_q 1 group 8
// CHECK:           attn.classify_tiles {{.+}} mask <sliding_window(64)> tile_q 1 tile_kv 16
// CHECK:           scf.for
// CHECK:             attn.split_range
// CHECK:             attn.state_init
// CHECK:             attn.block_table_lookup {{.+}} page_size 7
// CHECK:             attn.load_paged_kv_tile
// CHECK:             attn.rescale_factor {{.+}} inf_safe
// CHECK:             attn.tiles = "partial"
// CHECK:             attn.tiles = "full"
// CHECK:             attn.tiles = "partial"
// CHECK:             attn.merge {{.+}} inf_safe
// CHECK:           attn.loop = "kv_splits"
// CHECK:           attn.normalize {{.+}} inf_safe
// CHECK:         attn.gqa = 8
func.func @decode(%q: tensor<?x?x64xf64>, %kc: tensor<?x7x?x64xf64>, %vc: tensor<?x7x?x64xf64>, %bt: tensor<?xi32>, %n: index, %s: f64) -> tensor<?x?x64xf64>
    attributes {attn.spec = #attn.spec<mode = decode, target = cpu, dtype = f64, head_dim = 64, tile_kv = 16, mask = sliding_window(64), page_size = 7, gqa = 8, split_kv = 4>} {
  %k = attn.gather_pages %kc, %bt, %n : tensor<?x7x?x64xf64>, tensor<?xi32> -> tensor<?x?x64xf64>
  %v = attn.gather_pages %vc, %bt, %n : tensor<?x7x?x64xf64>, tensor<?xi32> -> tensor<?x?x64xf64>
  %o, %lse = attn.standard_attention %q, %k, %v scale %s mask #attn.mask<sliding_window(64)> gqa 8 : tensor<?x?x64xf64>, tensor<?x?x64xf64>, tensor<?x?x64xf64>, f64 -> tensor<?x?x64xf64>, tensor<?x?xf64>
  return %o : tensor<?x?x64xf64>
}
