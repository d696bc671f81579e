#!/usr/bin/env bash
# with-huge-pages.sh N CMD...: runs CMD with N more huge pages reserved on this host
# (vm.nr_hugepages, root only), for the tests of ftrt_alloc()'s memory files of huge pages and
# of the state transfer through them (comm/cma.h). CMD's environment has FTRT_TEST_HUGE_PAGES=1
# when the N pages were had (the test then requires the huge-page path), else 0 (not root, or
# the kernel found fewer: the test skips those cases, saying so). The count is set back to
# what it was when CMD ends, whatever its outcome. Exit status: CMD's. ctest runs such tests
# under RESOURCE_LOCK hugepages, so that two never move the count at once.
set -u
f=/proc/sys/vm/nr_hugepages
n=${1:?usage: with-huge-pages.sh N CMD...}
shift
old=$(cat "$f" 2>/dev/null || echo -1)
got=0
restore() { [ "$old" -ge 0 ] && [ "$(cat "$f")" != "$old" ] && echo "$old" >"$f" 2>/dev/null; }
if [ "$old" -ge 0 ] && echo $((old + n)) >"$f" 2>/dev/null; then
  trap restore EXIT
  [ "$(cat "$f")" -ge $((old + n)) ] && got=1
fi
[ $got -eq 1 ] || echo "with-huge-pages: $n huge pages could not be reserved (vm.nr_hugepages $old)" >&2
FTRT_TEST_HUGE_PAGES=$got "$@"
