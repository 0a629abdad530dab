#include "../../../../../src/include/mini_version.h"
int mini_atom(void);
