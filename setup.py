"""Builds the optional compiled batch codec (wire/batch_codec/_compiled.pyx).

Everything else is declared in pyproject.toml. The extension is optional: if it cannot be
compiled (no compiler, no zlib headers) the install still succeeds and the pure-Python codec
is used (``wire.batch_codec.ACCELERATED`` says which). Body CRCs use ISA-L when Debian's
``libisal-dev`` is installed (``./run`` installs it), else zlib: the same function, about ten
times faster (``wire/batch_codec/crc32.h``; ``wire.batch_codec.CRC32_BACKEND`` says which).
"""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

ISAL_HEADER = "/usr/include/isa-l/crc.h"
with_isal = os.path.exists(ISAL_HEADER) and os.environ.get("TROCKET_NO_ISAL", "") in ("", "0")

extension = Extension(
    "wire.batch_codec._compiled",
    ["wire/batch_codec/_compiled.pyx"],
    include_dirs=["wire/batch_codec"],
    libraries=["isal", "z"] if with_isal else ["z"],
    define_macros=[("TROCKET_ISAL", "1")] if with_isal else [],
    extra_compile_args=["-O2"],
    optional=True,
)

setup(ext_modules=cythonize([extension], compiler_directives={"language_level": "3"}, quiet=True))
