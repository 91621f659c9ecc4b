"""Builds the optional compiled batch codec (wire/batch_codec/_compiled.pyx).

Everything else is declared in pyproject.toml. The extension is optional: if it cannot be
compiled (no compiler, no zlib headers) the install still succeeds and the pure-Python codec
is used (``wire.batch_codec.ACCELERATED`` says which).
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

extension = Extension(
    "wire.batch_codec._compiled",
    ["wire/batch_codec/_compiled.pyx"],
    libraries=["z"],
    extra_compile_args=["-O2"],
    optional=True,
)

setup(ext_modules=cythonize([extension], compiler_directives={"language_level": "3"}, quiet=True))
