#include "mini_atom.h"
int mini_atom(void) { return MINI_VERSION; }
