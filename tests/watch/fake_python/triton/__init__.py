"""A fake triton whose import crashes the interpreter (SIGSEGV), as a mismatched native library can
(tests/watch/test_doctor.cpp): the doctor must report the crash and go on with the next item."""
import os
import signal
import sys

sys.stderr.write("fake triton: loading libtriton.so\n")
sys.stderr.flush()
os.kill(os.getpid(), signal.SIGSEGV)
