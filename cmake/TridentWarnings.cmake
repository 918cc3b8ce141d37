# Compile options shared by every trident target, through the interface target
# trident_options (linked PRIVATE, so they never leak to consumers).
add_library(trident_options INTERFACE)
target_compile_options(trident_options INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-unused-parameter
  $<$<COMPILE_LANGUAGE:CXX>:-Wconversion -Wno-sign-conversion>
)
if(TRIDENT_WERROR)
  target_compile_options(trident_options INTERFACE -Werror)
endif()
if(TRIDENT_NATIVE)
  target_compile_options(trident_options INTERFACE -march=native)
endif()
if(TRIDENT_SANITIZE)
  target_compile_options(trident_options INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(trident_options INTERFACE -fsanitize=address,undefined)
endif()
