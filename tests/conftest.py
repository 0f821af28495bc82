"""Test-session setup that must happen before numpy is first imported.

OpenBLAS's thread pool makes the small matrix operations of the overcommit forecasters (the
GP's Cholesky factorizations, statsmodels' ARIMA fits) about 10x slower on a shared 2-core
machine, and it is inherited by the notebook kernels the tests start; one thread per process
is what the pipelines' workers run anyway (a process per core).

Below that setup: the fixtures over the real Azure V1 samples in ../shared/data (the plain
loaders they use are in tests/helpers.py).
"""

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import pytest  # noqa: E402

from tests.helpers import (  # noqa: E402
    AZURE_READINGS,
    AZURE_VMTABLE,
    load_azure_instances,
    require_sample,
)


@pytest.fixture(scope="session")
def azure_vmtable():
    """Path of the real Azure V1 vmtable sample (259,159 VMs); skips the test if absent."""
    return require_sample(AZURE_VMTABLE)


@pytest.fixture(scope="session")
def azure_readings():
    """Path of the real Azure V1 CPU readings sample (50 VMs x 8004 readings); skips the test
    if absent."""
    return require_sample(AZURE_READINGS)


@pytest.fixture(scope="module")
def azure_instances(azure_vmtable):
    """The vmtable sample as canonical instances (a DataFrame; do not modify it)."""
    return load_azure_instances(azure_vmtable)
