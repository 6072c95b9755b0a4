// Everything a user of ftattn includes.
#pragma once

#include "ftattn/config.hpp"
#include "ftattn/errors.hpp"
#include "ftattn/kernel.hpp"
#include "ftattn/runtime.hpp"
