"""The package's version: project(VERSION) of the top CMakeLists.txt, which also gives ftrt.h
its FTRT_VERSION_* macros, libftrt its soname (libftrt.so.<major>) and the wheel its metadata
(pyproject.toml reads CMakeLists.txt). Kept here as a literal so that the package imported
from a source tree (bindings/python on sys.path) needs no CMake; `tools/check-version` (ctest
unit.version) fails when the two differ, and `tools/check-version --set X.Y.Z` changes both."""
__version__ = "0.1.0"
