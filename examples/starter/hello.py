"""The starter template's program: run it in a sandbox with `warren exec -- python3 hello.py`."""

print("hello from the starter template")
