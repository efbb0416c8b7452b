"""The GPU runtime: cuDNN and cuBLAS micro-benchmarks of every layer, every algorithm.

Nothing here imports a GPU library at import time: ``import benanza.runtimes.cuda`` works
on any machine, and the runtime says what is missing when asked to run.

Modules, pure ones first:

- ``params``: a layer's library call (convolution geometry, GEMM sizes, pooling window, ...)
  from its network node; ``Unsupported`` with the reason otherwise.
- ``candidate``: ``Candidate`` (one algorithm / engine configuration, built, with its
  ``launch``) and ``summarise`` (every candidate's timing into the stored record).
- ``stack``: the GPU stack fingerprint (driver, CUDA, cuDNN, cuBLAS, CuPy, GPU, clocks)
  from NVML and the libraries, with pure parsers of their version numbers.
- ``device``: one GPU, a private stream, buffers, L2 flush, cold (event) and hot (CUDA
  graph) samplers.
- ``cudnn_legacy``: the cuDNN 9 legacy API through ctypes (convolution algorithms as ONNX
  Runtime and PyTorch call them, conv+bias+activation, pooling, LRN, softmax, activation,
  batch normalisation).
- ``cudnn_graph``: the cuDNN graph API through ``nvidia-cudnn-frontend`` (engine
  configurations from the heuristics, fused conv+bias+activation, matmul).
- ``cublaslt``: GEMMs through cublasLt (``nvmath-python``): the heuristic's algorithms.
- ``framework``: element-wise and data-movement layers as CuPy's kernels.
- ``runtime``: the ``cudnn`` runtime of the registry.
"""
