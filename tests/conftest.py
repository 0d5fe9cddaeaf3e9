import os

# first, before NumPy loads OpenBLAS: it fixes OpenBLAS's kernel family, on
# which the pinned results of tests/test_behaviour.py depend
import behaviour_cases  # noqa: F401

# A hub lookup without network takes ~50 s to fail: never try.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
