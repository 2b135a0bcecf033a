#include <stdio.h>
int main(void) { puts("ferry"); return 0; }
