"""The package's version: project(VERSION) of the top CMakeLists.txt, which also gives ftrt.h
its FTRT_VERSION_* macros and libftrt its soname (libftrt.so.<major>). Kept here as a literal
so that `pip install bindings/python` works without CMake; `tools/check-version` (ctest
unit.version) fails when the two differ, and `tools/check-version --set X.Y.Z` changes both."""
__version__ = "0.1.0"
