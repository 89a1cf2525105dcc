// The `baton` executable: the command line of app/run.h with the built-in
// pieces alone.

#include "app/run.h"

int main(int argc, char** argv) {
  return baton::run(argc, argv);
}
