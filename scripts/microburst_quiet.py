"""microburst without its per-request access log.

scripts/emulator proxy-start runs this instead of the `microburst` command when
KARPCTL_MICROBURST_ACCESS_LOG=0 (scripts/bench does): aiohttp formats and writes one log line
per proxied request, about a quarter of microburst's CPU time, which the benchmark's
many-cluster runs share with the clusters they measure. Nothing reads those lines (the control
API's /_microburst/stats and /fired are the record). Everything else is microburst's own CLI,
with the same arguments.
"""

import logging
import sys

from microburst.cli import main

if __name__ == "__main__":
    # Disabled, the logger is not enabled for INFO, so aiohttp skips formatting the line too.
    logging.getLogger("aiohttp.access").disabled = True
    sys.exit(main())
