/* tests/unit/unit.h - what every cmocka unit test includes. */
#ifndef FERRY_TESTS_UNIT_H
#define FERRY_TESTS_UNIT_H
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#endif
