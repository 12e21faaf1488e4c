"""A fake bitsandbytes whose import hangs (tests/watch/test_doctor.cpp): the doctor's --timeout must
stop it, count it as failed and go on with the next item."""
import time

time.sleep(3600)
