"""tests/gpu/ratios.py on logs in the formats attn-gpu-check --bench and
sdpa_anchor.py print: every decode row is read, whatever its split count's
mark, and an anchor a backend could not run leaves the other's (no GPU needed)."""

import io
import json
import math
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(__file__))
import ratios  # noqa: E402

BENCH = """\
prefill (bf16, contiguous, B*N = 16384)                      ms    TFLOP/s
hd 128  N  1024  full      B 16  H 16                          0.500      500.0
decode (bf16, hd 128, paged, page 16)                        ms       GB/s splits
B  64  heads 32/8  kv  1024                                 0.100     4000.0      1
B  16  heads 32/8  kv 16384                                 0.100     4200.0     2p
B   8  heads 64/8  kv 32768                                 0.100     4100.0      4
B   1  heads 32/8  kv  8192                                 0.100     2000.0    16c
""".splitlines()

SDPA = """\
hd 128  N  1024  full      flash    0.600 ms   400.0 TFLOP/s  cudnn    0.400 ms   625.0 TFLOP/s
B  64  heads 32/8  kv  1024  flash    0.150 ms  2500.0 GB/s  cudnn n/a (no kernel for this shape)
B  16  heads 32/8  kv 16384  flash    0.110 ms  4000.0 GB/s  cudnn    0.100 ms  4200.0 GB/s
B   8  heads 64/8  kv 32768  flash    0.110 ms  4000.0 GB/s  cudnn    0.100 ms  4000.0 GB/s
""".splitlines()


class TestRows(unittest.TestCase):
    def test_every_decode_row_with_its_split_mark(self):
        prefill, decode = ratios.rows(BENCH, SDPA)
        self.assertEqual(len(prefill), 1)
        self.assertAlmostEqual(prefill[0]["x_fa2"], 500.0 / 400.0)
        self.assertAlmostEqual(prefill[0]["x_cudnn"], 500.0 / 625.0)
        self.assertEqual([(r["batch"], r["splits"]) for r in decode],
                         [(64, "1"), (16, "2p"), (8, "4"), (1, "16c")])
        self.assertAlmostEqual(decode[1]["x_cudnn"], 1.0)
        self.assertAlmostEqual(decode[2]["x_flash"], 4100.0 / 4000.0)

    def test_source_rows_with_their_verdicts(self):
        # attn-gpu-check --bench --source FILE: the row ends with the output's verdict.
        lines = BENCH + [
            "hd 128  N  1024  full      B 16  H 16  [old_none.cu]          0.510      490.2  ok",
            "B  64  heads 32/8  kv  1024  [probe.cu]                 0.090     4400.0      1  "
            "OUTPUT DIFFERS (relative L2 1.0e+00)"]
        prefill, decode = ratios.rows(lines, SDPA)
        self.assertEqual([r["variant"] for r in prefill], ["", "old_none.cu"])
        self.assertAlmostEqual(prefill[1]["x_fa2"], 490.2 / 400.0)
        self.assertEqual(decode[-1]["variant"], "probe.cu")
        self.assertAlmostEqual(decode[-1]["gbs"], 4400.0)

    def test_a_missing_anchor_leaves_the_other(self):
        _, decode = ratios.rows(BENCH, SDPA)
        self.assertAlmostEqual(decode[0]["flash"], 2500.0)
        self.assertTrue(math.isnan(decode[0]["cudnn"]))
        self.assertTrue(math.isnan(decode[3]["flash"]))  # no anchor row at all

    def test_summary_writes_strict_json(self):
        with tempfile.TemporaryDirectory() as logs:
            examples = ["4 kernels from the bundle llama_layer", "MATCHED",
                        "examples: attn-aot-example ok, attn-jit-at-load-example ok, llama.py ok"]
            for name, lines in (("bench.log", BENCH), ("sdpa.log", SDPA), ("examples.log", examples)):
                with open(os.path.join(logs, name), "w") as f:
                    f.write("\n".join(lines) + "\n")
            with redirect_stdout(io.StringIO()) as out:
                ratios.summary(logs)
            self.assertIn("| 16 | 32/8 | 16384 | 2p |", out.getvalue())
            self.assertIn("\nexamples: attn-aot-example ok, attn-jit-at-load-example ok, llama.py ok\n",
                          out.getvalue())
            with open(os.path.join(logs, "results.json")) as f:
                text = f.read()
        self.assertNotIn("NaN", text)
        result = json.loads(text)
        self.assertIsNone(result["decode"][0]["cudnn"])
        self.assertEqual(len(result["decode"]), 4)


if __name__ == "__main__":
    unittest.main(verbosity=2)
