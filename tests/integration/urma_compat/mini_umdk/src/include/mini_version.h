/* the miniature's "umdk src" tree: a case compiles against it by a path relative to the app layer */
#define MINI_VERSION 35
