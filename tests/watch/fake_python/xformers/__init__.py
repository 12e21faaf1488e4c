"""A fake xformers that is installed but broken: importing it fails the way a build for another
torch does (tests/watch/test_doctor.cpp)."""
raise RuntimeError("xFormers was built for PyTorch 2.0.1+cu118 with CUDA 1108 (you have 2.99.0+fake)\n"
                   "Please reinstall xformers (see https://github.com/facebookresearch/xformers#installing-xformers)")
