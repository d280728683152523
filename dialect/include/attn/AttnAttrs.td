//===- AttnAttrs.td - The spec and mask attributes ----------*- tablegen -*-===//

#ifndef ATTN_ATTRS_TD
#define ATTN_ATTRS_TD

include "attn/AttnDialect.td"
include "mlir/IR/AttrTypeBase.td"

class Attn_Attr<string name, string attrMnemonic> : AttrDef<Attn_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def Attn_SpecAttr : Attn_Attr<"Spec", "spec"> {
  let summary = "An attention spec: everything that changes the kernel";
  let description = [{
    The MLIR form of `attn::Spec`. It uses the spellings of the canonical
    text form (`attnc emit --spec`), with ` = ` and `, ` as separators, and
    goes through the same parser and validator, so an invalid spec gets the
    same error in IR as on the command line. Fields left out take the
    target's defaults; the printer writes every field.

    As the function attribute `attn.spec` it describes the function's kernel,
    and the verifier holds the IR to it: every `attn.standard_attention`
    inside has the spec's dtype, head_dim, mask and gqa, reads K and V through
    `attn.gather_pages` exactly when page_size > 0, and every
    `attn.gather_pages` has pages of page_size tokens.

    ```mlir
    func.func private @f() attributes {attn.spec = #attn.spec<mode = prefill,
        head_dim = 128, dtype = bf16, mask = causal, page_size = 16, gqa = 4>}
    ```
  }];
  let parameters = (ins "::attn::Spec":$value);
  let hasCustomAssemblyFormat = 1;
}

def Attn_MaskAttr : Attn_Attr<"Mask", "mask"> {
  let summary = "Which keys a query may see";
  let description = [{
    `none`, `causal` or `sliding_window(W)`. Queries and keys are aligned at
    the bottom right: with `q_len` queries and `kv_len` keys, query `i` sits
    at key position `p = i + kv_len - q_len`; causal lets it see keys
    `j <= p`, a sliding window keys `p - W < j <= p`. Every mask also hides
    keys at or past `kv_len` (the tail of the last KV tile).

    ```mlir
    %s_masked = attn.mask %s, %q_start, %kv_start, %q_len, %kv_len mask <sliding_window(256)> tile_q 64 : tensor<?x64xf32>
    ```
    Inside an op the attribute prints as `<sliding_window(256)>`; the full
    form `#attn.mask<sliding_window(256)>` parses too.
  }];
  let parameters = (ins "::attn::Mask":$value);
  let hasCustomAssemblyFormat = 1;
}

#endif // ATTN_ATTRS_TD
