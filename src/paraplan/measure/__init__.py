"""Measuring and fitting: samples in, fitted profiles out (the only package that imports torch).

- `samples`: read and write timing samples in the kernel-samples CSV layout.
- `datasets`: map each sample file's shapes onto the features the profile regressors use.
- `outliers`: the stated rule that drops bad rows and defective columns.
- `fit`: one regressor per operator and direction, family chosen by cross-validation -> a Profile.
- `bench`: torch microbenchmarks (`paraplan measure`) that write samples.

torch and scikit-learn are imported lazily, inside the functions that need them.
"""
