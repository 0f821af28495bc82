"""Test-session setup that must happen before numpy is first imported.

OpenBLAS's thread pool makes the small matrix operations of the overcommit forecasters (the
GP's Cholesky factorizations, statsmodels' ARIMA fits) about 10x slower on a shared 2-core
machine, and it is inherited by the notebook kernels the tests start; one thread per process
is what the pipelines' workers run anyway (a process per core).
"""

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
