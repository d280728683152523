// compute-sanitizer's racecheck and named barriers: a kernel with no race
// that racecheck reports one in, unless both groups pass their barrier as
// often. Why decode_block<2> calls pipe_sync_evenly (templates/attn/decode.cuh).
//
// Two groups of 128 threads each loop over their own named barrier (1 and 2),
// n0 and n1 times; then every thread writes its slot, one block barrier
// (__syncthreads), and every thread reads all 256 slots. The block barrier
// orders each write before each read, whatever n0 and n1 are.
//
//   nvcc -O3 -arch=sm_90a -lineinfo -o racecheck_pipes tests/gpu/racecheck_pipes.cu
//   for n1 in 0 3 39 40; do compute-sanitizer --tool racecheck ./racecheck_pipes $n1 | tail -n 1; done
//
// Measured on the H200 (CUDA 13, three runs each): n0 = 40 and n1 = 0, 3 or 39:
// "1 hazard displayed (1 error)", a RAW hazard between the write before the
// block barrier and the read after it; n1 = 40: 0 hazards.
#include <cstdio>
#include <cstdlib>

__global__ void pipes(int n0, int n1, int *out) {
  __shared__ int stage[2][128];
  __shared__ int slot[256];
  const int pipe = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int n = pipe ? n1 : n0;
  int sum = 0;
  for (int i = 0; i < n; ++i) {
    stage[pipe][tid] = i + tid;
    asm volatile("bar.sync %0, %1;" ::"r"(1 + pipe), "n"(128) : "memory");
    sum += stage[pipe][(tid + 1) % 128];
    asm volatile("bar.sync %0, %1;" ::"r"(1 + pipe), "n"(128) : "memory");
  }
  slot[threadIdx.x] = sum;
  __syncthreads();
  int total = 0;
  for (int t = 0; t < 256; ++t)
    total += slot[t];
  out[blockIdx.x * 256 + threadIdx.x] = total;
}

int main(int argc, char **argv) {
  const int n0 = 40, n1 = argc > 1 ? atoi(argv[1]) : 3;
  if (n1 < 0 || n1 > 1000) {
    fprintf(stderr, "usage: racecheck_pipes [N1 in 0..1000] (the second group's loop count)\n");
    return 2;
  }
  int *out = nullptr;
  if (cudaMalloc(&out, 64 * 256 * sizeof(int)) != cudaSuccess) {
    fprintf(stderr, "no GPU memory: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  pipes<<<64, 256>>>(n0, n1, out);
  int host[256];
  const cudaError_t rc = cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
  // The block sum again, on the host.
  long expect = 0;
  for (int t = 0; t < 256; ++t) {
    const int n = t / 128 ? n1 : n0, tid = t % 128;
    for (int i = 0; i < n; ++i)
      expect += i + (tid + 1) % 128;
  }
  const bool ok = rc == cudaSuccess && host[0] == static_cast<int>(expect);
  printf("n0 %d n1 %d: block sum %d, expected %ld: %s\n", n0, n1, host[0], expect,
         rc != cudaSuccess ? cudaGetErrorString(rc) : ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
