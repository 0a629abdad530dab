#include <stdio.h>
#include "mini_atom.h"
int main(int argc, char **argv) {
    printf("case test_mini_compiled on %s: %d\n", argc > 1 ? argv[1] : "?", mini_atom());
    return 0;
}
