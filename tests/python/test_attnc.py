"""The Python module over the C API, without torch or a GPU: library loading,
specs, and the refusals that come before any launch (run by ctest with
ATTNC_LIBRARY pointing at the built libattnc.so)."""

import copy
import gc
import os
import pathlib
import pickle
import shutil
import subprocess
import sys
import tempfile
import types
import unittest
import weakref

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "runtime", "python"))
import attnc  # noqa: E402


class FakeCudaArray:
    """Just the __cuda_array_interface__ of a device array (never dereferenced)."""

    def __init__(self, shape, typestr="<f2", strides=None, ptr=0x7f0000000000):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (ptr, False), "version": 3}


class TestLibrary(unittest.TestCase):
    def test_version_and_canonical_spec(self):
        self.assertTrue(attnc.version().startswith("attnc "))
        # (The build's file is libattnc.so.<version>, behind libattnc.so and its soname.)
        self.assertRegex(os.path.basename(attnc.library_path()), r"^libattnc\.so(\.\d+)*$")
        spec = attnc.canonical_spec("gqa=4, mask=causal")
        self.assertTrue(spec.startswith("mode=prefill,head_dim=128,dtype=bf16,"), spec)
        self.assertIn("gqa=4", spec)

    def test_bad_spec_names_the_field(self):
        with self.assertRaises(attnc.AttncError) as e:
            attnc.canonical_spec("head_dim=100")
        self.assertIn("invalid spec: head_dim = 100", str(e.exception))


class TestPageAllocator(unittest.TestCase):
    """attnc.PageAllocator over attnc_pages_* (attn::PageAllocator): no GPU needed."""

    def test_sequences_growing_together_keep_to_their_windows(self):
        pages = attnc.PageAllocator(4 * 64, 64)
        rows = {s: [] for s in range(4)}
        for _ in range(64):
            for s in rows:
                rows[s] += pages.allocate(s)
        for s, row in rows.items():
            self.assertEqual(pages.windows(s), 1)
            self.assertEqual(row, list(range(row[0], row[0] + 64)))
        self.assertEqual(pages.free_pages, 0)
        pages.release(2)
        self.assertEqual(pages.free_pages, 64)
        self.assertEqual(pages.windows(2), 0)
        self.assertEqual(pages.allocate(9, 3), rows[2][:3])

    def test_a_request_too_large_takes_nothing(self):
        pages = attnc.PageAllocator(10, 4)
        pages.allocate(1, 8)
        with self.assertRaises(attnc.AttncError) as e:
            pages.allocate(2, 3)
        self.assertIn("asks for 3 pages, but only 2 of the cache's 10 are free", str(e.exception))
        self.assertEqual(pages.free_pages, 2)
        self.assertEqual(pages.allocate(2, 0), [])

    def test_bad_arguments_are_named(self):
        for args, text in (((0, 64), "num_pages = 0"), ((100, 0), "pages_per_window = 0"),
                           ((100, 8, 9), "first_window_pages = 9"), ((2.5, 8), "num_pages")):
            with self.assertRaises(attnc.AttncError) as e:
                attnc.PageAllocator(*args)
            self.assertIn(text, str(e.exception))
        pages = attnc.PageAllocator(16, 8)
        with self.assertRaises(attnc.AttncError) as e:
            pages.release(3)
        self.assertIn("sequence 3 holds no pages", str(e.exception))
        for bad in (-1, True, "a"):
            with self.assertRaises(attnc.AttncError):
                pages.allocate(bad)
        with self.assertRaises(attnc.AttncError) as e:
            pages.allocate(1, -2)
        self.assertIn("count = -2", str(e.exception))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.PageAllocator.for_cache(FakeCudaArray((10, 16, 128)))
        self.assertIn("expected [num_pages, page_size, num_kv_heads, head_dim]", str(e.exception))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.PageAllocator.for_cache(FakeCudaArray((10, 16, 8, 128),
                                                        strides=(0, 4096, 256, 2)))
        self.assertIn("cache's pages lie 0 bytes apart", str(e.exception))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.PageAllocator.for_cache([1, 2, 3])
        self.assertIn("cache is a list", str(e.exception))
        for huge in (10**15, 2**62 - 1):
            with self.assertRaises(attnc.AttncError) as e:
                pages.allocate(1, huge)
            self.assertIn(f"asks for {huge} pages, but only 16", str(e.exception))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.PageAllocator(2**31 - 1, 1)
        self.assertIn("windows: at most 4194304", str(e.exception))

    def test_threads_may_share_an_allocator(self):
        # The C allocator is not thread-safe; the Python one takes its calls in
        # turn (shared by four threads it crashed the interpreter).
        import threading
        pages = attnc.PageAllocator(4096, 64)
        errors = []

        def serve(tid):
            try:
                for i in range(300):
                    s = tid * 100000 + i
                    pages.allocate(s, 3)
                    pages.allocate(s, 2)
                    if i % 2:
                        pages.release(s)
            except attnc.AttncError as e:  # the pool runs out: said, not a crash
                errors.append(str(e))

        threads = [threading.Thread(target=serve, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        # 4 threads x 150 sequences kept, 5 pages each.
        self.assertEqual(pages.free_pages, 4096 - 4 * 150 * 5)

    def test_a_bad_array_interface_is_an_attnc_error(self):
        shape = (10, 16, 8, 128)
        cases = [
            ({"shape": shape, "typestr": "<f2", "version": 3}, "has no data"),
            ({"shape": shape, "typestr": "<V", "data": (0, False)}, "typestr = '<V'"),
            ({"shape": shape, "typestr": "f16", "data": (0, False)}, "typestr = 'f16'"),
            ({"shape": shape, "typestr": "<f0", "data": (0, False)}, "typestr = '<f0'"),
            ({"shape": None, "typestr": "<f2", "data": (0, False)}, "shape = None"),
            ({"shape": (100.9, 16, 8, 128), "typestr": "<f2", "data": (0, False)},
             "holds 100.9, not an integer"),
            ({"shape": shape, "typestr": "<f2", "data": (0, False), "strides": ("32768",) * 4},
             "holds '32768', not an integer"),
            ({"shape": shape, "typestr": "<f2", "data": (0, False), "strides": ()},
             "strides () for a shape of 4 dimensions"),
            ({"shape": shape, "typestr": "<f2", "data": (1.5, False)}, "holds 1.5"),
            ({"shape": shape, "typestr": "<f2", "data": (-1, False)}, "holds -1, out of 0 .."),
            ("not a dict", "is a str, not a dict"),
        ]
        for cai, message in cases:
            fake = types.SimpleNamespace(__cuda_array_interface__=cai)
            with self.assertRaises(attnc.AttncError, msg=cai) as e:
                attnc.PageAllocator.for_cache(fake)
            self.assertIn("cache's __cuda_array_interface__", str(e.exception))
            self.assertIn(message, str(e.exception))

    def test_an_allocator_is_not_copied(self):
        # A copy would share the C handle and destroy it a second time.
        pages = attnc.PageAllocator(10, 4)
        for copy_of, what in ((copy.copy, "copied"), (copy.deepcopy, "copied"),
                              (pickle.dumps, "pickled")):
            with self.assertRaises(TypeError) as e:
                copy_of(pages)
            self.assertIn(f"attnc.PageAllocator cannot be {what}", str(e.exception))
        gc.collect()
        self.assertEqual(pages.allocate(1, 2), [0, 1])  # the handle is still the object's

    def test_the_page_count_is_kept_as_checked(self):
        class Index:
            def __index__(self):
                return 10
        pages = attnc.PageAllocator(Index(), 4)
        self.assertEqual(type(pages.num_pages), int)
        self.assertEqual(len(pages.allocate(0, 2)), 2)

    def test_windows_follow_the_cache_address(self):
        page = 16 * 8 * 128 * 2
        self.assertEqual(attnc.PageAllocator.window(page), (64, 64))
        self.assertEqual(attnc.PageAllocator.window(page, 3 * (2 << 20) - 5 * page), (64, 5))
        pages = attnc.PageAllocator.for_cache(FakeCudaArray((200, 16, 8, 128),
                                                            ptr=(2 << 20) - page))
        # Slot 0 is a window of its own (before the boundary), slots 1-64 the next one.
        self.assertEqual(pages.allocate(1, 3), [1, 2, 3])
        self.assertEqual(pages.allocate(2, 64), list(range(65, 129)))
        dense = FakeCudaArray((200, 16, 8, 128), strides=(page, 2048, 256, 2))
        self.assertEqual(attnc.PageAllocator.for_cache(dense).allocate(1, 2), [0, 1])
        # K of a cache whose K and V pages lie side by side: pages 2 * page bytes apart,
        # 32 to a window; this one starts 3 pages before a boundary.
        k = FakeCudaArray((200, 16, 8, 128), strides=(2 * page, 2048, 256, 2),
                          ptr=(2 << 20) - 3 * 2 * page)
        pages = attnc.PageAllocator.for_cache(k)
        self.assertEqual(pages.allocate(1, 4), [3, 4, 5, 6])   # the emptiest window: 3-34
        self.assertEqual(pages.allocate(1, 29), list(range(7, 36)))
        self.assertEqual(pages.windows(1), 2)


class TestSpecFor(unittest.TestCase):
    """attnc.spec_for derives through the C library (attnc_attention_spec): the same
    rules as the C++ attn::attention, without a GPU."""

    def test_odd_targets_and_dtypes_are_refused(self):
        for target in (" sm_90a", "sm_90a ", "sm_80\n", "sm_80\t", "sm_0800", "sm_090"):
            with self.assertRaises(attnc.AttncError, msg=repr(target)):
                attnc.spec_for("bf16", 128, 8, 8, target=target)
        self.assertIn("target=sm_80,", attnc.spec_for("bf16", 128, 8, 8, target="sm_86"))

        class EqualToAll:  # as a numpy array of one string compares
            def __eq__(self, other):
                return True
        with self.assertRaises(attnc.AttncError) as e:
            attnc.spec_for(EqualToAll(), 128, 8, 8, target="sm_90a")
        self.assertIn("the kernels take bf16 or f16", str(e.exception))

    def test_paged_one_token_is_decode(self):
        spec = attnc.spec_for("bf16", 128, 32, 8, target="sm_90a", page_size=16, max_q_len=1)
        self.assertTrue(spec.startswith("mode=decode,head_dim=128,dtype=bf16,tile_q=1,"), spec)
        self.assertIn(",page_size=16,gqa=4,", spec)
        self.assertTrue(spec.endswith("target=sm_90a,split_kv=auto"), spec)

    def test_contiguous_few_tokens_are_decode(self):
        spec = attnc.spec_for("bf16", 128, 32, 8, target="sm_90a", max_q_len=2, causal=True)
        self.assertTrue(spec.startswith("mode=decode,head_dim=128,dtype=bf16,tile_q=2,"), spec)
        self.assertIn(",mask=causal,page_size=0,gqa=4,", spec)
        # 17 query tokens, or 4 of 64-head groups (256 rows a block): prefill.
        for heads, tokens in ((32, 17), (64, 4)):
            spec = attnc.spec_for("bf16", 128, heads, 1, target="sm_90a", max_q_len=tokens)
            self.assertTrue(spec.startswith("mode=prefill,"), (heads, tokens, spec))
        spec = attnc.spec_for("bf16", 128, 32, 8, target="sm_90a", max_q_len=1, decode=False)
        self.assertTrue(spec.startswith("mode=prefill,"), spec)

    def test_no_query_token_is_not_decode(self):
        spec = attnc.spec_for("bf16", 128, 32, 8, target="sm_90a", page_size=16, max_q_len=0)
        self.assertTrue(spec.startswith("mode=prefill,"), spec)

    def test_every_field_given(self):
        spec = attnc.spec_for("f16", 64, 8, 8, target="sm_80", max_q_len=4096, window=256,
                              return_lse=True, tile_q=64, tile_kv=64)
        self.assertEqual(spec, "mode=prefill,head_dim=64,dtype=f16,tile_q=64,tile_kv=64,"
                               "mask=sliding_window(256),page_size=0,gqa=1,return_lse=true,"
                               "target=sm_80")
        spec = attnc.spec_for("bf16", 128, 16, 2, target="sm_90a", page_size=32, max_q_len=3,
                              causal=True, decode=True, split_kv=4)
        self.assertTrue(spec.startswith("mode=decode,head_dim=128,dtype=bf16,tile_q=3,"), spec)
        self.assertIn(",mask=causal,page_size=32,gqa=8,", spec)
        self.assertTrue(spec.endswith(",split_kv=4"), spec)

    def test_a_split_count_for_a_prefill_kernel_is_refused(self):
        # split_kv is the decode kernels': asked of a call that takes prefill, it is refused
        # with the reason, rather than dropped from the spec.
        for extra, why in ((dict(max_q_len=64), "max_q_len = 64 with a GQA group of 4"),
                           (dict(max_q_len=1, decode=False), "(decode = false)"),
                           (dict(max_q_len=1, tile_q=64), "tile_q = 64 is given")):
            with self.assertRaises(attnc.AttncError) as e:
                attnc.spec_for("bf16", 128, 32, 8, target="sm_90a", split_kv=4, **extra)
            self.assertIn("split_kv = 4: only decode kernels split the keys", str(e.exception))
            self.assertIn(why, str(e.exception))
        # 'auto' is attnc's choice, which a prefill kernel has nothing to choose.
        spec = attnc.spec_for("bf16", 128, 32, 8, target="sm_90a", max_q_len=64, split_kv="auto")
        self.assertTrue(spec.startswith("mode=prefill,"), spec)

    def test_long_head_dim_64_prefill(self):
        # sm_90a, head_dim 64: the wgmma block for short prefills (64 x 128 tiles without
        # a mask, 64 x 64 under a causal one), the warp-specialised block's 192 x 128 from
        # 4096 query rows, causal or not.
        def tiles(max_q_len, causal):
            spec = attnc.spec_for("bf16", 64, 16, 16, target="sm_90a", max_q_len=max_q_len,
                                  causal=causal)
            return spec.split(",")[3:5]
        self.assertEqual(tiles(4095, False), ["tile_q=64", "tile_kv=128"])
        self.assertEqual(tiles(4096, False), ["tile_q=192", "tile_kv=128"])
        self.assertEqual(tiles(4095, True), ["tile_q=64", "tile_kv=64"])
        self.assertEqual(tiles(4096, True), ["tile_q=192", "tile_kv=128"])

    def test_refusals_name_the_problem(self):
        cases = [
            (dict(num_q_heads=30), "30 query heads are not a multiple of 8 KV heads"),
            (dict(dtype="f32"), "bf16 or f16"),
            (dict(head_dim=100), "invalid spec: head_dim = 100"),
            (dict(window=0), "window = 0 must be >= 1"),
            (dict(window=2**31), "window = 2147483648 must be <= 999999999"),
            (dict(split_kv=0), "split_kv = 0 must be >= 1"),
            (dict(target="sm_75"), "target"),
            # Nothing wraps or is truncated on its way to C, and other types are named.
            (dict(head_dim=2**64 + 128), "head_dim = 18446744073709551744 must be <="),
            (dict(split_kv=2**32 + 4), "split_kv = 4294967300 must be <= 2147483647"),
            (dict(num_q_heads=2**64 + 8), "num_q_heads = 18446744073709551624 must be <="),
            (dict(head_dim=128.7), "head_dim = 128.7: expected an integer"),
            (dict(window=True), "window = True: expected an integer, not a bool"),
            (dict(split_kv="AUTO"), "split_kv = 'AUTO': expected an integer or 'auto'"),
            (dict(target=None), "target = None: expected a string"),
            (dict(target="sm_90a,tile_q=128"), "expected sm_80 or sm_90a alone"),
            (dict(target="cpu"), "target = cpu: attention calls take GPU kernels"),
            (dict(num_q_heads=0), "num_q_heads = 0 must be >= 1"),
            (dict(num_kv_heads=-8, num_q_heads=-2), "num_q_heads = -2"),
            (dict(max_q_len=-5), "max_q_len = -5 must be >= 0"),
            # A yes/no argument is a bool: 'no' is not read as True.
            (dict(causal="no"), "causal = 'no': expected True or False"),
            (dict(target="sm_90a\0"), "holds a NUL character"),
        ]
        for change, message in cases:
            kw = dict(dtype="bf16", head_dim=128, num_q_heads=32, num_kv_heads=8,
                      target="sm_90a", page_size=16)
            kw.update(change)
            with self.assertRaises(attnc.AttncError, msg=str(change)) as e:
                attnc.spec_for(kw.pop("dtype"), kw.pop("head_dim"), kw.pop("num_q_heads"),
                               kw.pop("num_kv_heads"), **kw)
            self.assertIn(message, str(e.exception))


    def test_a_gpu_architecture_names_its_target(self):
        # Runtime().arch is the GPU's: sm_86 and the like build for sm_80, sm_9x for sm_90a.
        for arch, target in [("sm_86", "sm_80"), ("sm_89", "sm_80"), ("sm_90", "sm_90a")]:
            spec = attnc.spec_for("bf16", 128, 32, 8, target=arch, page_size=16)
            self.assertTrue(spec.endswith(f"target={target},split_kv=auto"), (arch, spec))


class TestArgumentTypes(unittest.TestCase):
    def test_text_with_a_nul_is_refused(self):
        # C would read only up to the NUL: 'mode=prefill' instead of what was given.
        with self.assertRaises(attnc.AttncError) as e:
            attnc.canonical_spec("mode=prefill\0,foo=1")
        self.assertIn("holds a NUL character", str(e.exception))

    def test_a_library_named_but_unusable_is_an_error(self):
        import subprocess
        env = dict(os.environ, ATTNC_LIBRARY="/nonexistent/libattnc.so")
        run = subprocess.run([sys.executable, "-c", "import attnc; attnc.version()"], env=env,
                             cwd=os.path.join(os.path.dirname(__file__), "..", "..", "runtime",
                                              "python"),
                             capture_output=True, text=True)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("ATTNC_LIBRARY names a library that cannot be used: "
                      "/nonexistent/libattnc.so (no such file)", run.stderr)

    def test_a_bad_tuning_table_is_said_once(self):
        # The C API uses the table's tiles as defaults; one it cannot read is
        # ignored with one warning on stderr, however many calls consult it.
        import subprocess
        import tempfile
        with tempfile.TemporaryDirectory() as scratch:
            table = os.path.join(scratch, "tuning.txt")
            with open(table, "w") as f:
                f.write("not a line\n")
            library = os.path.abspath(attnc._library()._name)
            env = dict(os.environ, ATTNC_LIBRARY=library, ATTNC_TUNING_FILE=table)
            run = subprocess.run([sys.executable, "-c", "import attnc\n"
                                  "for _ in range(3): print(attnc.canonical_spec('gqa=4'))"],
                                 env=env, cwd=os.path.join(os.path.dirname(__file__), "..", "..",
                                                           "runtime", "python"),
                                 capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.count("gqa=4"), 3)
        self.assertEqual(run.stderr.count("attnc: warning: the tuning table is ignored: "), 1,
                         run.stderr)
        self.assertIn("tuning.txt:1: ", run.stderr)

    def test_prepare_takes_a_list_of_specs(self):
        kernel = object()
        held = types.SimpleNamespace(_kernels={"mode=prefill": kernel})
        # An iterator is read once, and its specs still come back in order.
        self.assertEqual(attnc.Runtime.prepare(held, iter(["mode=prefill"] * 2)), [kernel] * 2)
        for bad, message in [("mode=prefill", "expected a list of specs, not one"),
                             ([5], "spec = 5: expected a string")]:
            with self.assertRaises(attnc.AttncError) as e:
                attnc.Runtime.prepare(held, bad)
            self.assertIn(message, str(e.exception))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.Runtime.kernel(held, 5)
        self.assertIn("spec = 5: expected a string", str(e.exception))

    def test_numpy_bools_and_floats_are_not_numbers_or_flags(self):
        class NumpyBool:  # as numpy.bool_: an __index__, and a dtype of kind "b"
            dtype = types.SimpleNamespace(kind="b")

            def __index__(self):
                return 1

            def __bool__(self):
                return True

            def __repr__(self):
                return "True"

        for call, message in [
                (lambda: attnc.PageAllocator(NumpyBool(), 1),
                 "num_pages = True: expected an integer, not a bool"),
                (lambda: attnc.spec_for("f16", 128, 8, 8, target="sm_90a", page_size=NumpyBool()),
                 "page_size = True: expected an integer, not a bool"),
                (lambda: attnc.spec_for("f16", 128, 8, 8, target="sm_90a", causal=1.0),
                 "causal = 1.0: expected True or False"),
                (lambda: attnc.spec_for("f16", 128, 8, 8, target="sm_90a", causal=2),
                 "causal = 2: expected True or False")]:
            with self.assertRaises(attnc.AttncError) as e:
                call()
            self.assertIn(message, str(e.exception))
        # numpy's bool and the integers 0 / 1 are yes / no.
        for yes in (True, 1, NumpyBool()):
            self.assertIn("mask=causal", attnc.spec_for("f16", 128, 8, 8, target="sm_90a",
                                                         causal=yes))

    def test_prepare_counts_its_threads(self):
        held = types.SimpleNamespace(_kernels={}, _handle=None)
        for threads, message in [(1.5, "threads = 1.5: expected an integer"),
                                 (-1, "threads = -1 must be >= 0"),
                                 (1 << 40, f"threads = {1 << 40} must be <= {(1 << 32) - 1}")]:
            with self.assertRaises(attnc.AttncError) as e:
                attnc.Runtime.prepare(held, ["mode=prefill"], threads)
            self.assertIn(message, str(e.exception))

    def test_strings_and_numbers_are_checked(self):
        with self.assertRaises(attnc.AttncError) as e:
            attnc.canonical_spec(None)
        self.assertIn("spec = None: expected a string", str(e.exception))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.Runtime(cache_dir=5)
        self.assertIn("cache_dir = 5: expected a folder's path", str(e.exception))
        # A lone surrogate has no UTF-8 form.
        with self.assertRaises(attnc.AttncError) as e:
            attnc.canonical_spec("mode=\udcff")
        self.assertIn("not text UTF-8 can hold", str(e.exception))

    def test_an_interface_without_its_keys(self):
        class Bare:
            __cuda_array_interface__ = {}
        with self.assertRaises(attnc.AttncError) as e:
            attnc.attention(Bare(), FakeCudaArray((4, 2, 64)), FakeCudaArray((4, 2, 64)))
        self.assertIn("q's __cuda_array_interface__ has no shape, typestr, data", str(e.exception))

    def test_empty_offsets_are_named(self):
        with self.assertRaises(attnc.AttncError) as e:
            attnc.attention(FakeCudaArray((4, 2, 64)), FakeCudaArray((4, 2, 64)),
                            FakeCudaArray((4, 2, 64)), cu_seqlens_q=FakeCudaArray((0,), "<i4"),
                            cu_seqlens_k=FakeCudaArray((1,), "<i4"), max_seqlen_q=1,
                            max_seqlen_k=1)
        self.assertIn("cu_seqlens_q has 0 entries: at least 2", str(e.exception))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.attention(FakeCudaArray((4, 2, 64)), FakeCudaArray((4, 2, 64)),
                            FakeCudaArray((4, 2, 64)), cu_seqlens_q=FakeCudaArray((2,), "<i4"),
                            cu_seqlens_k=FakeCudaArray((2,), "<i4"), max_seqlen_q="4",
                            max_seqlen_k=4)
        self.assertIn("max_seqlen_q = '4': expected an integer", str(e.exception))


class TestTensorChecks(unittest.TestCase):
    def test_host_memory_is_refused(self):
        with self.assertRaises(attnc.AttncError) as e:
            attnc.attention([[1.0]], FakeCudaArray((4, 1, 64)), FakeCudaArray((4, 1, 64)))
        self.assertIn("q is not a CUDA array", str(e.exception))

    def test_wrong_dtype_is_refused(self):
        q = FakeCudaArray((4, 2, 64), typestr="<f8")
        with self.assertRaises(attnc.AttncError) as e:
            attnc.attention(q, FakeCudaArray((4, 2, 64)), FakeCudaArray((4, 2, 64)))
        self.assertIn("q has typestr '<f8'", str(e.exception))

    def test_non_contiguous_is_refused(self):
        k = FakeCudaArray((4, 2, 64), strides=(256, 2, 512))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.attention(FakeCudaArray((4, 2, 64)), k, FakeCudaArray((4, 2, 64)))
        self.assertIn("k is not contiguous", str(e.exception))

    def test_read_only_and_masked_arrays_are_refused(self):
        # What the kernel writes (out, lse, a workspace) must not say it is read-only;
        # a masked array is taken nowhere. (Checked before a launch, which needs a GPU.)
        out = FakeCudaArray((4, 2, 64))
        out.__cuda_array_interface__["data"] = (0x7f0000000000, True)
        with self.assertRaises(attnc.AttncError) as e:
            attnc._View(out, "out", written=True)
        self.assertIn("out is read-only", str(e.exception))
        self.assertEqual(attnc._View(out, "k").shape, (4, 2, 64))  # only read: taken
        q = FakeCudaArray((4, 2, 64))
        q.__cuda_array_interface__["mask"] = FakeCudaArray((4, 2, 64), typestr="|b1")
        with self.assertRaises(attnc.AttncError) as e:
            attnc.attention(q, FakeCudaArray((4, 2, 64)), FakeCudaArray((4, 2, 64)))
        self.assertIn("q has a mask", str(e.exception))

    def test_shapes_are_checked(self):
        cases = [
            ((4, 64), (4, 2, 64), (4, 2, 64), "q has shape (4, 64)"),
            ((4, 2, 64), (4, 2, 64), (4, 2, 32), "v has shape (4, 2, 32) but k has (4, 2, 64)"),
            ((4, 2, 64), (4, 2, 32), (4, 2, 32), "k has head_dim 32 but q has 64"),
            ((4, 3, 64), (4, 2, 64), (4, 2, 64), "q has 3 heads, not a multiple of k's 2"),
        ]
        for q, k, v, want in cases:
            with self.assertRaises(attnc.AttncError) as e:
                attnc.attention(FakeCudaArray(q), FakeCudaArray(k), FakeCudaArray(v))
            self.assertIn(want, str(e.exception))

    def test_a_malformed_array_interface_is_named(self):
        k = FakeCudaArray((16, 8, 128))
        cases = [
            ({"shape": (4, 8, 128), "typestr": ["<f2"], "data": (1, False)}, "typestr = ['<f2']"),
            ({"shape": 5, "typestr": "<f2", "data": (1, False)}, "shape = 5"),
            ({"shape": (4, 8, 128), "typestr": "<f2", "data": None}, "data = None"),
            ({"shape": (4, 8, 128), "typestr": "<f2", "data": ("0x10", False)}, "holds '0x10'"),
            ({"shape": (4, 8, 128), "typestr": "<f2", "data": (1 << 64, False)},
             "out of 0 .. 18446744073709551615"),
            ({"shape": (4, 8, 128), "typestr": "<f2", "data": (1, False), "strides": 5},
             "strides = 5"),
        ]
        for cai, message in cases:
            q = types.SimpleNamespace(__cuda_array_interface__=cai)
            with self.assertRaises(attnc.AttncError, msg=cai) as e:
                attnc.attention(q, k, k)
            self.assertIn("q's __cuda_array_interface__", str(e.exception))
            self.assertIn(message, str(e.exception))
        paged = types.SimpleNamespace(__cuda_array_interface__={
            "shape": (10, 16, 8, 128), "typestr": "<f2", "data": (1, False),
            "strides": (32768, 2048)})
        with self.assertRaises(attnc.AttncError) as e:
            attnc.attention(FakeCudaArray((2, 8, 128)), paged, paged)
        self.assertIn("strides (32768, 2048) for a shape of 4 dimensions", str(e.exception))

    def test_sizes_past_the_launch_fields_are_refused(self):
        # ctypes would keep the low bits: 2^32 + 8 heads would launch as 8.
        heads = (1 << 32) + 8
        with self.assertRaises(attnc.AttncError) as e:
            attnc.attention(FakeCudaArray((4, heads, 64)), FakeCudaArray((4, heads, 64)),
                            FakeCudaArray((4, heads, 64)), cu_seqlens_q=FakeCudaArray((2,), "<i4"),
                            cu_seqlens_k=FakeCudaArray((2,), "<i4"), max_seqlen_q=4,
                            max_seqlen_k=4)
        self.assertIn(f"num_q_heads (q's heads) = {heads} does not fit the launch's arguments",
                      str(e.exception))
        args = attnc._Args()
        with self.assertRaises(attnc.AttncError):
            args.kv_page_stride = 1 << 65
        with self.assertRaises(attnc.AttncError):
            args.q = -1
        args.q = (1 << 64) - 1
        self.assertEqual(args.q, (1 << 64) - 1)

    def test_a_zero_scale_is_refused(self):
        # 0 is the launch's "1 / sqrt(head_dim)": a scale of 0 asked for would be that.
        for zero in (0, 0.0, -0.0):
            with self.assertRaises(attnc.AttncError) as e:
                attnc.attention(FakeCudaArray((4, 2, 64)), FakeCudaArray((4, 2, 64)),
                                FakeCudaArray((4, 2, 64)), cu_seqlens_q=FakeCudaArray((2,), "<i4"),
                                cu_seqlens_k=FakeCudaArray((2,), "<i4"), max_seqlen_q=4,
                                max_seqlen_k=4, scale=zero)
            self.assertIn("must be finite and > 0 (scale=None: 1 / sqrt(head_dim))",
                          str(e.exception))

    def test_a_scale_past_a_double_is_refused(self):
        with self.assertRaises(attnc.AttncError) as e:
            attnc.attention(FakeCudaArray((4, 2, 64)), FakeCudaArray((4, 2, 64)),
                            FakeCudaArray((4, 2, 64)), cu_seqlens_q=FakeCudaArray((2,), "<i4"),
                            cu_seqlens_k=FakeCudaArray((2,), "<i4"), max_seqlen_q=4,
                            max_seqlen_k=4, scale=10**400)
        self.assertIn("does not fit in a double", str(e.exception))

    def test_paged_cache_needs_its_table(self):
        kv = FakeCudaArray((10, 16, 2, 64))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.attention(FakeCudaArray((2, 8, 64)), kv, kv,
                            cu_seqlens_q=FakeCudaArray((3,), "<i4"), max_seqlen_q=1)
        self.assertIn("needs block_table and seq_lens_k", str(e.exception))

    def test_offsets_without_torch_must_be_given(self):
        # Without torch, or (a stand-in torch here) with a q that is not a torch
        # tensor: nothing can be allocated on q's device, so the offsets are asked for.
        from unittest import mock
        stand_in = types.ModuleType("torch")
        stand_in.Tensor = type("Tensor", (), {})
        for modules in ({}, {"torch": stand_in}):
            with mock.patch.dict(sys.modules, modules):
                with self.assertRaises(attnc.AttncError, msg=str(modules)) as e:
                    attnc.attention(FakeCudaArray((4, 2, 64)), FakeCudaArray((4, 2, 64)),
                                    FakeCudaArray((4, 2, 64)))
                self.assertIn("cu_seqlens must be given as CUDA int32 arrays without torch",
                              str(e.exception))


class TestPagedLayouts(unittest.TestCase):
    """A paged cache may be any view of its pages whose head_dim is contiguous: its
    strides travel to the kernel; layouts it cannot read are refused by name."""

    # [pages, page, heads, d] views (element strides) of three layouts of 10 pages of 16
    # tokens, 2 KV heads of 64.
    PACKED = (16 * 2 * 64, 2 * 64, 64, 1)
    HEADS_FIRST = (2 * 16 * 64, 64, 16 * 64, 1)     # [pages, heads, page, d]
    POOLS = (16 * 64, 64, 10 * 16 * 64, 1)          # [heads, pages, page, d]

    def view(self, strides, typestr="<f2"):
        return FakeCudaArray((10, 16, 2, 64), typestr, tuple(2 * x for x in strides))

    def strides(self, strides):
        k = attnc._View(self.view(strides), "k", strided=True)
        return attnc._cache_strides(k, k)

    def test_strides_in_elements(self):
        self.assertEqual(self.strides(self.PACKED), (2048, 128, 64))
        self.assertEqual(self.strides(self.HEADS_FIRST), (2048, 64, 1024))
        self.assertEqual(self.strides(self.POOLS), (1024, 64, 10240))
        # Without strides an interface is packed.
        k = attnc._View(FakeCudaArray((10, 16, 2, 64)), "k", strided=True)
        self.assertEqual(attnc._cache_strides(k, k), (2048, 128, 64))
        # A dimension of one entry has no stride to give.
        one = attnc._View(FakeCudaArray((10, 16, 1, 64), strides=(4096, 256, 14, 2)), "k",
                          strided=True)
        self.assertEqual(attnc._cache_strides(one, one), (2048, 128, 0))

    def test_a_strided_view_reaches_the_kernel(self):
        spec = TestPlanDerivesItsSpec().asked(
            FakeCudaArray((2, 8, 64)), self.view(self.POOLS), self.view(self.POOLS),
            cu_seqlens_q=FakeCudaArray((3,), "<i4"), max_seqlen_q=1,
            block_table=FakeCudaArray((2, 5), "<i4"), seq_lens_k=FakeCudaArray((2,), "<i4"),
            max_seqlen_k=80)
        self.assertTrue(spec.startswith("mode=decode,head_dim=64,"), spec)
        # One KV head: its stride means nothing, so k and v may differ there.
        k = FakeCudaArray((10, 16, 1, 64), strides=(4096, 128, 14, 2))
        v = FakeCudaArray((10, 16, 1, 64), strides=(4096, 128, 0, 2))
        spec = TestPlanDerivesItsSpec().asked(
            FakeCudaArray((2, 8, 64)), k, v, cu_seqlens_q=FakeCudaArray((3,), "<i4"),
            max_seqlen_q=1, block_table=FakeCudaArray((2, 5), "<i4"),
            seq_lens_k=FakeCudaArray((2,), "<i4"), max_seqlen_k=80)
        self.assertIn(",gqa=8,", spec)

    def test_layouts_that_cannot_be_read_are_named(self):
        q = FakeCudaArray((2, 8, 64))
        rest = dict(cu_seqlens_q=FakeCudaArray((3,), "<i4"), max_seqlen_q=1,
                    block_table=FakeCudaArray((2, 5), "<i4"),
                    seq_lens_k=FakeCudaArray((2,), "<i4"), max_seqlen_k=80)
        cases = [
            (self.view(self.PACKED), self.view(self.POOLS), "k has strides (2048, 128, 64, 1) "
             "but v has (1024, 64, 10240, 1): the two must share a layout"),
            (self.view((2048, 128, 1, 2)),) * 2 + ("k's head_dim is not contiguous",),
            (self.view((2048, 132, 64, 1)),) * 2 + ("k's token stride of 132 elements is not "
                                                     "a multiple of 8",),
            (self.view((0, 128, 64, 1)),) * 2 + ("k's page stride is 0",),
            (FakeCudaArray((10, 16, 2, 64), strides=(4096, 256, 129, 2)),) * 2 + (
                "k's strides (4096, 256, 129, 2) are not whole elements of 2 bytes",),
        ]
        for k, v, want in cases:
            with self.assertRaises(attnc.AttncError) as e:
                attnc.plan(q, k, v, **rest)
            self.assertIn(want, str(e.exception))
        # A contiguous (3-dimensional) k must still be contiguous.
        with self.assertRaises(attnc.AttncError) as e:
            attnc.attention(q, FakeCudaArray((4, 2, 64), strides=(256, 2, 512)),
                            FakeCudaArray((4, 2, 64)))
        self.assertIn("k is not contiguous", str(e.exception))


class TestPlanDerivesItsSpec(unittest.TestCase):
    """attnc.plan up to the kernel lookup, with a stand-in runtime: the spec it asks
    for comes from spec_for with the runtime's target."""

    class Asked(Exception):
        pass

    class FakeRuntime:
        arch = "sm_80"

        def kernel(self, spec):
            raise TestPlanDerivesItsSpec.Asked(spec)

    def asked(self, *args, **kw):
        real = attnc._runtime_for
        attnc._runtime_for = lambda device: self.FakeRuntime()
        try:
            with self.assertRaises(self.Asked) as e:
                attnc.plan(*args, **kw)
        finally:
            attnc._runtime_for = real
        return str(e.exception)

    def test_paged_decode_and_contiguous_prefill(self):
        kv = FakeCudaArray((10, 16, 2, 128), typestr="<f2")
        spec = self.asked(FakeCudaArray((2, 8, 128)), kv, kv,
                          cu_seqlens_q=FakeCudaArray((3,), "<i4"), max_seqlen_q=1,
                          block_table=FakeCudaArray((2, 5), "<i4"),
                          seq_lens_k=FakeCudaArray((2,), "<i4"), max_seqlen_k=80, causal=True)
        self.assertTrue(spec.startswith("mode=decode,head_dim=128,dtype=f16,tile_q=1,"), spec)
        self.assertIn(",mask=causal,page_size=16,gqa=4,return_lse=false,target=sm_80,", spec)
        spec = self.asked(FakeCudaArray((300, 4, 64)), FakeCudaArray((300, 2, 64)),
                          FakeCudaArray((300, 2, 64)), cu_seqlens_q=FakeCudaArray((2,), "<i4"),
                          max_seqlen_q=300, cu_seqlens_k=FakeCudaArray((2,), "<i4"),
                          max_seqlen_k=300, window=100, tile_q=64, tile_kv=32)
        self.assertEqual(spec, "mode=prefill,head_dim=64,dtype=f16,tile_q=64,tile_kv=32,"
                               "mask=sliding_window(100),page_size=0,gqa=2,return_lse=false,"
                               "target=sm_80")


class TestPlanChecksWhatItLaunches(unittest.TestCase):
    """attnc.plan through to the launch, with a stand-in runtime whose kernel needs
    a 1 MiB workspace (none when launched unsplit) and records what it was launched with."""

    NEED = 1 << 20

    class FakeKernel:
        spec = "fake"

        def __init__(self):
            self.launched = []
            self.splits = []

        def workspace_bytes(self, args):
            return 0 if args.num_splits == 1 else TestPlanChecksWhatItLaunches.NEED

        def launch(self, args, stream=0):
            self.launched.append((args.workspace_bytes, stream))
            self.splits.append(args.num_splits)

    class FakeRuntime:
        arch = "sm_90a"

        def __init__(self, kernel):
            self.the_kernel = kernel

        def kernel(self, spec):
            return self.the_kernel

    def setUp(self):
        self.kernel = self.FakeKernel()
        self.real = attnc._runtime_for
        attnc._runtime_for = lambda device: self.FakeRuntime(self.kernel)

    def tearDown(self):
        attnc._runtime_for = self.real

    def decode_args(self, **kw):
        kv = FakeCudaArray((10, 16, 2, 128))
        args = dict(cu_seqlens_q=FakeCudaArray((3,), "<i4"), max_seqlen_q=1,
                    block_table=FakeCudaArray((2, 5), "<i4"),
                    seq_lens_k=FakeCudaArray((2,), "<i4"), max_seqlen_k=80,
                    out=FakeCudaArray((2, 8, 128)))
        args.update(kw)
        return (FakeCudaArray((2, 8, 128)), kv, kv), args

    def test_a_workspace_too_small_is_refused(self):
        tensors, args = self.decode_args(workspace=FakeCudaArray((8,)))  # 16 bytes
        with self.assertRaises(attnc.AttncError) as e:
            attnc.plan(*tensors, **args)
        self.assertIn(f"workspace holds 16 bytes; this call needs {self.NEED}", str(e.exception))
        self.assertEqual(self.kernel.launched, [])

    def test_without_a_workspace_or_torch_the_launch_is_unsplit(self):
        tensors, args = self.decode_args()
        attnc.attention(*tensors, **args)
        self.assertEqual(self.kernel.launched, [(0, 0)])
        self.assertEqual(self.kernel.splits, [1])
        attnc.attention(*tensors, split_kv="auto", **args)  # attnc's choice, named
        self.assertEqual(self.kernel.splits, [1, 1])
        # A split count the call fixes is kept: its workspace must be given.
        with self.assertRaises(attnc.AttncError) as e:
            attnc.plan(*tensors, split_kv=3, **args)
        self.assertIn("workspace must be given", str(e.exception))
        # A workspace given: attnc's split count (0), merged through it.
        tensors, args = self.decode_args(workspace=FakeCudaArray((self.NEED,), "|u1"))
        attnc.attention(*tensors, **args)
        self.assertEqual(self.kernel.splits[-1], 0)

    def test_a_byte_workspace_passes_its_own_size(self):
        tensors, args = self.decode_args(workspace=FakeCudaArray((self.NEED + 64,), "|u1"))
        attnc.attention(*tensors, stream=7, **args)
        self.assertEqual(self.kernel.launched, [(self.NEED + 64, 7)])

    def test_a_stream_object_or_handle(self):
        tensors, args = self.decode_args(workspace=FakeCudaArray((self.NEED,), "|u1"))
        attnc.attention(*tensors, stream=types.SimpleNamespace(cuda_stream=42), **args)
        self.assertEqual(self.kernel.launched[-1][1], 42)
        with self.assertRaises(attnc.AttncError) as e:
            attnc.attention(*tensors, stream="default", **args)
        self.assertIn("stream = 'default': expected a CUDA stream handle", str(e.exception))
        for handle in (-1, 1 << 64):  # no handle: ctypes would make 2^64 the default stream
            with self.assertRaises(attnc.AttncError) as e:
                attnc.attention(*tensors, stream=handle, **args)
            self.assertIn(f"stream = {handle}: expected a CUDA stream handle", str(e.exception))

    def test_a_kernel_checks_its_own_stream_and_arguments(self):
        # Kernel.launch and check_arguments are public: they refuse what ctypes
        # would truncate (2^64 + 5 as stream 5) or raise a raw TypeError on.
        held = types.SimpleNamespace(_handle=None)
        for method in (attnc.Kernel.launch, attnc.Kernel.check_arguments):
            for handle in (-1, (1 << 64) + 5, "x", True):
                with self.assertRaises(attnc.AttncError) as e:
                    method(held, attnc._Args(), handle)
                self.assertIn(f"stream = {handle!r}: expected a CUDA stream handle",
                              str(e.exception))
            with self.assertRaises(attnc.AttncError) as e:
                method(held, "args", 0)
            self.assertIn("args = 'args': expected the launch arguments of a Plan",
                          str(e.exception))

    def test_yes_no_arguments_and_an_lse_nobody_writes(self):
        tensors, args = self.decode_args(workspace=FakeCudaArray((self.NEED,), "|u1"))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.plan(*tensors, check_arguments="no", **args)
        self.assertIn("check_arguments = 'no': expected True or False", str(e.exception))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.plan(*tensors, lse=FakeCudaArray((2, 8), "<f4"), **args)
        self.assertIn("lse is given but return_lse is False", str(e.exception))
        self.assertEqual(self.kernel.launched, [])

    def test_a_plan_keeps_the_callers_tensors(self):
        tensors, args = self.decode_args(workspace=FakeCudaArray((self.NEED,), "|u1"))
        watched = [weakref.ref(t) for t in tensors] + [weakref.ref(t) for t in args.values()
                                                        if isinstance(t, FakeCudaArray)]
        plan = attnc.plan(*tensors, **args)
        del tensors, args
        gc.collect()
        self.assertTrue(all(w() is not None for w in watched))
        plan.run()
        del plan
        gc.collect()
        self.assertTrue(all(w() is None for w in watched))

    def test_a_max_length_below_the_one_sequence_is_refused(self):
        q, kv = FakeCudaArray((300, 4, 64)), FakeCudaArray((300, 2, 64))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.plan(q, kv, kv, max_seqlen_q=10)
        self.assertIn("max_seqlen_q = 10, but q holds one sequence of 300 tokens", str(e.exception))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.plan(q, kv, kv, cu_seqlens_q=FakeCudaArray((2,), "<i4"), max_seqlen_q=300,
                       max_seqlen_k=299)
        self.assertIn("max_seqlen_k = 299, but k holds one sequence of 300 tokens", str(e.exception))


class TestBundles(unittest.TestCase):
    """attnc.load_bundle over attnc_bundle_load: a folder that `attnc aot` wrote
    (ctest gives ATTNC_EXECUTABLE); no GPU needed to register its kernels."""

    @classmethod
    def setUpClass(cls):
        exe = os.environ.get("ATTNC_EXECUTABLE")
        if not exe:
            raise unittest.SkipTest("ATTNC_EXECUTABLE is not set (ctest sets it to the built attnc)")
        cls.tmp = tempfile.mkdtemp(prefix="attnc-py-bundle-")
        specs = os.path.join(cls.tmp, "specs.txt")
        with open(specs, "w") as f:
            f.write("mode=decode,head_dim=64,page_size=16,gqa=2\n")
        cls.bundle = os.path.join(cls.tmp, "bundle")
        subprocess.run([exe, "aot", "--specs", specs, "--arch", "sm_80", "-j1", "--name",
                        "python_test_bundle", "-o", cls.bundle], check=True,
                       stdout=subprocess.DEVNULL)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_a_folder_loads_and_loads_again(self):
        self.assertEqual(attnc.load_bundle(self.bundle), 1)
        # Again, as a Path and as bytes: the same folder, no "already registered".
        self.assertEqual(attnc.load_bundle(pathlib.Path(self.bundle)), 1)
        self.assertEqual(attnc.load_bundle(os.fsencode(self.bundle)), 1)

    def test_a_copy_laid_out_otherwise_is_the_same_bundle(self):
        self.assertEqual(attnc.load_bundle(self.bundle), 1)
        copy = os.path.join(self.tmp, "crlf")
        shutil.copytree(self.bundle, copy)
        manifest = pathlib.Path(copy, "manifest.txt")
        text = manifest.read_text()
        manifest.write_bytes((text.replace("\n", "\r\n") + "\r\n# a comment\r\n").encode())
        self.assertEqual(attnc.load_bundle(copy), 1)   # no "already registered"
        # A manifest that says another thing of its kernel (its registers) under the
        # same name is another bundle, still refused.
        other = os.path.join(self.tmp, "other")
        shutil.copytree(self.bundle, other)
        manifest = pathlib.Path(other, "manifest.txt")
        lines = manifest.read_text().split("\n")
        fields = lines[2].split(" ")
        fields[9] = str(int(fields[9]) + 1)  # arch spec cubin threads ... registers
        lines[2] = " ".join(fields)
        manifest.write_text("\n".join(lines))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.load_bundle(other)
        self.assertIn("a bundle named 'python_test_bundle' is already registered",
                      str(e.exception))

    def test_a_nul_in_a_manifest_does_not_cut_the_message(self):
        copy = os.path.join(self.tmp, "nul")
        shutil.copytree(self.bundle, copy)
        manifest = pathlib.Path(copy, "manifest.txt")
        manifest.write_bytes(manifest.read_bytes().replace(b"\nsm_80 ", b"\nsm_80\0 ", 1))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.load_bundle(copy)
        self.assertIn("architecture sm_80\\x00 for a spec of target sm_80", str(e.exception))

    def test_a_corrupted_folder_is_refused_whole(self):
        copy = os.path.join(self.tmp, "corrupted")
        shutil.copytree(self.bundle, copy)
        cubin = next(pathlib.Path(copy, "cubins").glob("*.cubin"))
        with open(cubin, "ab") as f:
            f.write(b"x")
        with self.assertRaises(attnc.AttncError) as e:
            attnc.load_bundle(copy)
        self.assertIn("loading the bundle " + copy, str(e.exception))
        self.assertIn(f"manifest.txt:3: cubins/{cubin.name} is corrupted", str(e.exception))

    def test_what_is_not_a_bundle_folder_is_named(self):
        with self.assertRaises(attnc.AttncError) as e:
            attnc.load_bundle(self.tmp)
        self.assertIn(os.path.join(self.tmp, "manifest.txt") + ": cannot open", str(e.exception))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.load_bundle(None)
        self.assertIn("expected a folder's path", str(e.exception))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.load_bundle(b"/tmp/\xff\xfe-not-utf-8")  # a bytes name that is not UTF-8
        self.assertIn("cannot open", str(e.exception))
        with self.assertRaises(attnc.AttncError) as e:
            attnc.load_bundle("bad\0name")
        self.assertIn("holds a NUL character", str(e.exception))

    def test_aot_only_takes_true_or_false(self):
        for bad in ("yes", 2, None, 1 + 0j):
            with self.assertRaises(attnc.AttncError) as e:
                attnc.set_aot_only(bad)
            self.assertIn("aot_only = ", str(e.exception))
            with self.assertRaises(attnc.AttncError):
                attnc.Runtime(aot_only=bad)  # refused before a runtime is made
        attnc.set_aot_only(False)


class TestRuntime(unittest.TestCase):
    def test_runtime_binds_or_says_why(self):
        try:
            rt = attnc.Runtime()
        except attnc.AttncError as e:
            self.assertIn("attnc runtime:", str(e))
            self.assertTrue("CUDA driver" in str(e) or "device" in str(e), str(e))
            return
        self.assertTrue(rt.arch.startswith("sm_"))
        kernel = rt.kernel("mode=decode,page_size=16,gqa=4")
        self.assertIn("target=" + ("sm_90a" if rt.arch == "sm_90a" else "sm_80"), kernel.spec)
        self.assertIn(kernel.source, ("compiled", "disk", "memory"))
        # AOT only: a spec no bundle holds is refused (that a kernel got before is
        # still served is the C API test's: here Python's own dict would answer).
        rt.aot_only = True
        with self.assertRaises(attnc.AttncError) as e:
            rt.kernel("mode=decode,head_dim=96,page_size=16,gqa=4")
        self.assertIn("is in no AOT bundle built for " + rt.arch, str(e.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
