"""Through the C ABI, a malformed program is INVALID_ARGUMENT and the plugin lives on."""
import numpy as np
import pytest

from pjrtkit.discovery import load_backend
from pjrtkit.errors import ErrorCode
from pjrtkit.conformance.abi_driver import AbiDriver


def _double_plus_one(x):
    return x * 2 + 1


@pytest.mark.parametrize("keep", [0.5, 0.9, 16])
def test_truncated_bytecode_is_invalid_argument_and_the_client_still_works(keep):
    with AbiDriver.from_backend(load_backend("cpu")) as driver:
        code = driver.artifact(_double_plus_one, np.ones(4, np.float32))
        cut = code[:int(len(code) * keep)] if keep < 1 else code[:keep]
        error = driver.raw("PJRT_Client_Compile",
                           driver.compile_args(cut, driver.compile_options()))
        assert error is not None, "a truncated program compiled"
        assert error.code == ErrorCode.INVALID_ARGUMENT, error
        assert "could not parse the program" in str(error)
        # The same client compiles the whole program afterwards.
        args = driver.compile_args(code, driver.compile_options())
        assert driver.raw("PJRT_Client_Compile", args) is None
        driver.call("PJRT_LoadedExecutable_Destroy", executable=args.executable)
