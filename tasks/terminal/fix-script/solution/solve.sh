#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
printf '#!/bin/bash\nif [ 1 -eq 1 ]; then\n  echo ok\nfi\n' > greet.sh
