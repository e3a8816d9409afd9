"""A client adapter that says hello and then never answers (the hang test's client)."""

import json
import sys
import time

print(json.dumps({"event": "hello", "client": "hang", "version": "0", "language": "python", "runtime": "test",
                  "api": "", "features": []}), flush=True)
for _line in sys.stdin:
    time.sleep(3600)
