"""Measuring and fitting on this machine: samples in, fitted profiles out, and real runs of the target's
layers (the only package that imports torch; the core never imports it).

- `samples`: read and write timing samples in the kernel-samples CSV layout.
- `datasets`: map each sample file's shapes onto the features the profile regressors use.
- `outliers`: the stated rule that drops bad rows and defective columns.
- `fit`: one regressor per operator and direction, family chosen by cross-validation -> a Profile.
- `bench`: torch microbenchmarks (`paraplan measure`) that write samples.
- `device`: the devices at hand and the torch that drives them (is torch there, CUDA, dtypes, threads, load).
- `processes`: N local processes in one torch.distributed group (gloo on CPU, NCCL on CUDA).
- `layers`: reference transformer layers in plain PyTorch at one rank's shard shapes.
- `reference`: the reference model built from those layers, which both torch harnesses train.
- `e2e`: a small reference training run on this CPU against `measure`, `fit` and `project --profile`.
- `hybrid`: downscale, measure, upscale (`paraplan project --hybrid`): the target's own layers timed here.

torch and scikit-learn are imported lazily, inside the functions that need them (`layers` and
`hybrid.bench` import torch when imported: only code that already measures imports them).
"""
