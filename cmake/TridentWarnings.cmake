# Compile options shared by every trident target, through the interface target
# trident_options (linked PRIVATE, so they never leak to consumers).
add_library(trident_options INTERFACE)
# nvcc takes host-compiler warnings through -Xcompiler; device code is checked by
# nvcc itself (all its warnings are errors under TRIDENT_WERROR).
target_compile_options(trident_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-unused-parameter>
  $<$<COMPILE_LANGUAGE:CXX>:-Wconversion -Wno-sign-conversion>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter --expt-relaxed-constexpr>
)
if(TRIDENT_WERROR)
  target_compile_options(trident_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
                                                   $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
endif()
if(TRIDENT_NATIVE)
  target_compile_options(trident_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>
                                                   $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-march=native>)
endif()
if(TRIDENT_SANITIZE)
  target_compile_options(trident_options INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(trident_options INTERFACE -fsanitize=address,undefined)
endif()
